// Package pgfence implements fencing guards in PostgreSQL: the resource side
// of a lock, which refuses a write from a holder whose lock was lost (see
// package fence for the rule and why the resource must take part).
//
// # Two shapes
//
// [Table] fences the rows of a table of yours. Each row carries its own
// highest fence and a digest of the holder's token, in two columns, and
// [Table.Update] is one conditional UPDATE:
//
//	UPDATE accounts SET balance = $4, fence = $1, fence_holder = $2
//	WHERE id = $3 AND (fence IS NULL OR fence < $1 OR (fence = $1 AND fence_holder = $2))
//
// A stale holder's late write matches no row and changes nothing; Update
// then returns a *fence.StaleError (errors.Is(err, fence.ErrStale)).
//
// [Guard] keeps one row per named resource in a guard table of its own
// ("dlock_guard" by default, see Guard.MigrateSQL). [Guard.Register] raises the
// resource's fence inside the caller's transaction and keeps its row locked
// until the transaction ends, so everything the transaction then writes is
// fenced, whatever tables it touches.
//
// # The rule, and the two details that make it safe
//
// A fence f from the holder with token tok is accepted when f is greater
// than the highest fence the resource has seen, or equal to it and tok is
// the holder that set it (the tie rule: after node faults two holders can
// carry the same fence, and a plain "fence <= f" would let both in).
//
// Read-modify-write must register before it reads: call Register first in
// the transaction (Table.Register or Guard.Register), then read, then
// write. Otherwise a stale write can land between the read and the write,
// be accepted, and be overwritten without anyone being told.
//
// Fences are compared as numeric(20,0), exactly, over the whole uint64
// range; a bigint fence column works too for fences below 2^63.
//
// # Transactions
//
// The guards run their statements on whatever they are given: pass the
// pgx.Tx that does the work, or, on database/sql (and sqlx, GORM, ent,
// bun), the *sql.Tx wrapped with [SQL]. Under READ COMMITTED (PostgreSQL's default) a
// concurrent guarded transaction waits for the row lock and is then judged
// against the committed fence; under REPEATABLE READ or SERIALIZABLE it may
// fail with a serialization error instead (dlock.ErrUnavailable), which the
// caller retries.
package pgfence
