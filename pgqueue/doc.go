// Package pgqueue is a job queue in a PostgreSQL table, whose workers claim
// distinct jobs with SELECT ... FOR UPDATE SKIP LOCKED, through pgx v5.
//
// For "each job exactly once", a lock per job is the wrong tool: let the
// row locks do it. Queue.Claim deletes up to n jobs no other transaction
// holds inside the worker's transaction; if the transaction commits, the
// jobs are done, and if it rolls back or its session dies, they are back
// for another worker. Queue.Work wraps one batch in a transaction. No
// advisory lock and no fence is involved (for those, see package pglock).
// The same pattern works on your own tables:
//
//	WITH c AS MATERIALIZED (
//		SELECT id FROM jobs ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
//	DELETE FROM jobs j USING c WHERE j.id = c.id RETURNING j.*;
//
// Errors match dlock's sentinels: dlock.ErrInvalid for bad arguments and a
// table whose id numbers no rows, dlock.ErrUnavailable otherwise.
package pgqueue
