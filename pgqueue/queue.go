package pgqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/pgmigrate"
)

// Queue is a job table from which many workers claim distinct jobs. The
// jobs' effects must be written in the claiming transaction for "exactly
// once" to hold; a side effect outside the database (an e-mail) can happen
// again when a transaction fails after it. A Queue is safe for concurrent
// use.
type Queue struct {
	table string // quoted, possibly schema-qualified
	name  string // as given, for messages
}

// Job is one claimed job.
type Job struct {
	ID      int64
	Payload []byte
}

// NewQueue returns the queue kept in table ("jobs" or "schema.jobs"). Create
// the table with Migrate, or yourself with at least these columns: id, a
// bigint primary key that numbers new rows itself (GENERATED ... AS
// IDENTITY, or bigserial), in the order they are added, and payload bytea.
// Enqueue on a table whose id has no default returns an error matching
// dlock.ErrInvalid that says so.
func NewQueue(table string) (*Queue, error) {
	parts := strings.Split(table, ".")
	switch {
	case table == "" || len(parts) > 2 || strings.ContainsRune(table, 0):
		return nil, bridge.Invalidf("queue table %q: want name or schema.name", table)
	case slices.Contains(parts, ""):
		return nil, bridge.Invalidf("queue table %q: empty name part", table)
	}
	return &Queue{table: pgx.Identifier(parts).Sanitize(), name: table}, nil
}

// Migrate creates the queue table if it does not exist. It is safe to run
// from several processes at once.
func (q *Queue) Migrate(ctx context.Context, db Execer) error {
	if ctx == nil || nodeerr.IsNil(db) {
		return bridge.Invalidf("nil context or database handle")
	}
	_, err := db.Exec(ctx, pgmigrate.Serialized(`CREATE TABLE IF NOT EXISTS `+q.table+` (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		payload bytea NOT NULL,
		enqueued_at timestamptz NOT NULL DEFAULT now()
	)`))
	if err != nil {
		return q.err("migrate", err)
	}
	return nil
}

// Execer is what Migrate needs: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Querier is what Enqueue needs: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Enqueue adds jobs with the given payloads in one statement and returns
// their ids, in order. Inside a transaction the jobs become claimable when
// it commits.
func (q *Queue) Enqueue(ctx context.Context, db Querier, payloads ...[]byte) ([]int64, error) {
	if ctx == nil || nodeerr.IsNil(db) {
		return nil, bridge.Invalidf("nil context or database handle")
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	// The server stores a nil payload empty (payload is NOT NULL).
	rows, err := db.Query(ctx, `INSERT INTO `+q.table+` (payload)
		SELECT coalesce(p, '') FROM unnest($1::bytea[]) WITH ORDINALITY AS u(p, n) ORDER BY n RETURNING id`, payloads)
	if err != nil {
		return nil, q.err("enqueue", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, q.err("enqueue", err)
	}
	return ids, nil
}

// Claim takes up to n jobs that no other transaction has claimed, oldest
// first, and deletes them inside tx. It does not wait for jobs other
// workers hold: it skips them, and returns an empty slice when nothing is
// free. The jobs are done when tx commits; a rollback returns them to the
// queue.
func (q *Queue) Claim(ctx context.Context, tx pgx.Tx, n int) ([]Job, error) {
	switch {
	case ctx == nil || nodeerr.IsNil(tx):
		return nil, bridge.Invalidf("nil context or transaction")
	case n <= 0:
		return nil, bridge.Invalidf("claim batch size %d: must be positive", n)
	}
	// MATERIALIZED: the locking subquery runs once, whatever the plan.
	rows, err := tx.Query(ctx, `WITH c AS MATERIALIZED (
		SELECT id FROM `+q.table+` ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
		DELETE FROM `+q.table+` t USING c WHERE t.id = c.id
		RETURNING t.id, t.payload`, n)
	if err != nil {
		return nil, q.err("claim", err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Job])
	if err != nil {
		return nil, q.err("claim", err)
	}
	slices.SortFunc(jobs, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

// TxBeginner is what Work needs: a *pgxpool.Pool or *pgx.Conn.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Work claims up to n jobs in a new transaction and calls fn with them and
// the transaction, in which fn should write the jobs' effects. When fn
// returns nil the transaction commits and the jobs are done; when it
// returns an error (or panics) the transaction rolls back and the jobs go
// back to the queue. Work returns how many jobs were done: 0 with a nil
// error when no job was free (fn is not called then).
func (q *Queue) Work(ctx context.Context, db TxBeginner, n int, fn func(ctx context.Context, tx pgx.Tx, jobs []Job) error) (done int, err error) {
	switch {
	case ctx == nil || nodeerr.IsNil(db) || fn == nil:
		return 0, bridge.Invalidf("nil context, database handle or function")
	case n <= 0:
		return 0, bridge.Invalidf("claim batch size %d: must be positive", n)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, q.err("begin", err)
	}
	defer func() {
		// A no-op after a commit; needed even when ctx is why fn gave up.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = tx.Rollback(rctx)
		cancel()
	}()
	jobs, err := q.Claim(ctx, tx, n)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	if err := fn(ctx, tx, jobs); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		// After a lost reply, effects and deletion are still atomic.
		return 0, q.err("commit", err)
	}
	return len(jobs), nil
}

func (q *Queue) err(op string, err error) error {
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe):
	case pe.Code == "42P01": // undefined_table
		return fmt.Errorf("pgqueue: queue %q: %s: %w: table missing (create it with Queue.Migrate): %w", q.name, op, dlock.ErrUnavailable, nodeerr.OneLine(err))
	case pe.Code == "23502" && pe.ColumnName == "id": // not_null_violation
		// Retrying cannot help: the table must change.
		return fmt.Errorf("pgqueue: queue %q: %s: %w: the table's id column has no default; make it number new rows (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, or bigserial), or create the table with Queue.Migrate: %w",
			q.name, op, dlock.ErrInvalid, nodeerr.OneLine(err))
	}
	return fmt.Errorf("pgqueue: queue %q: %s: %w: %w", q.name, op, dlock.ErrUnavailable, nodeerr.OneLine(err))
}
