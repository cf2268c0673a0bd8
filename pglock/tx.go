package pglock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
)

// TryLockTx takes the transaction-level advisory lock on k inside tx, if no
// other session holds it, and draws a fence in the same statement. The lock
// is released when tx commits or rolls back; there is no way to release it
// earlier and no handle to extend.
//
// The fence comes from the same sequence as session locks' fences, which is
// not transactional: a rollback does not give the number back, so it is
// never handed out twice. It is on disk once tx has committed (pglock makes
// the commit flush when it has to, see the package documentation); after a
// crash before that commit the number may come again, like everything else
// tx did. Fence the writes tx makes itself; to fence a resource outside the
// database, use a session lock (Locker).
//
// Under REPEATABLE READ or SERIALIZABLE, tx reads from a snapshot taken
// before the lock was granted, so it does not see what the previous holder
// committed (see the package documentation): use READ COMMITTED.
//
// It returns an error matching dlock.ErrNotAcquired when another session
// holds k, and dlock.ErrUnavailable (with ErrNotMigrated or ErrReadOnly
// where that is the reason) or dlock.ErrInvalid otherwise. After an error
// other than ErrNotAcquired the transaction is aborted: roll it back.
func TryLockTx(ctx context.Context, tx pgx.Tx, k Key) (fence uint64, err error) {
	if err := checkTx(ctx, tx, k); err != nil {
		return 0, err
	}
	return lockTx(ctx, tx, k, txTrySQL[k.form()])
}

// LockTx is TryLockTx that waits, in the server's lock queue, while another
// session holds k. The wait ends with ctx: pgx then cancels the statement
// and closes tx's connection, so no waiter or lock is left behind on the
// server, and tx is gone. A lock_timeout set in tx ends it too.
//
// Besides TryLockTx's errors it returns one matching ErrDeadlock (and
// dlock.ErrNotAcquired) when PostgreSQL broke a deadlock by aborting this
// wait, ErrOutOfLocks when the server's lock table is full, and one matching
// dlock.ErrNotAcquired and ctx.Err() when ctx ended first.
func LockTx(ctx context.Context, tx pgx.Tx, k Key) (fence uint64, err error) {
	if err := checkTx(ctx, tx, k); err != nil {
		return 0, err
	}
	return lockTx(ctx, tx, k, txWaitSQL[k.form()])
}

// The transaction-lock statements, for bigint keys and pairs; each yields
// the fence, NULL when the lock was not granted. The waiting form calls
// pg_advisory_xact_lock (void) in FROM: the row, and with it the fence,
// exists once the lock is granted.
var txTrySQL, txWaitSQL [2]string

func init() {
	for i, pair := range []bool{false, true} {
		p, _ := keyParams(pair)
		txTrySQL[i] = `SELECT ` + fenceExpr(`pg_try_advisory_xact_lock`+p)
		txWaitSQL[i] = `SELECT ` + fenceExpr("") + ` FROM pg_advisory_xact_lock` + p
	}
}

func lockTx(ctx context.Context, tx pgx.Tx, k Key, sql string) (uint64, error) {
	var f pgtype.Int8
	if err := tx.QueryRow(ctx, sql, k.args()...).Scan(&f); err != nil {
		return 0, acquireErr(ctx, k.String(), txNode(tx), err)
	}
	if !f.Valid {
		return 0, fmt.Errorf("dlock: acquire %q: %w (held by another session)", k.String(), dlock.ErrNotAcquired)
	}
	return uint64(f.Int64), nil
}

func checkTx(ctx context.Context, tx pgx.Tx, k Key) error {
	switch {
	case ctx == nil:
		return driver.Invalidf("nil context")
	case isNil(tx):
		return driver.Invalidf("nil transaction")
	case !k.valid():
		return driver.Invalidf("zero Key (build keys with HashKey, Int64Key or KeyPair)")
	}
	return nil
}

func txNode(tx pgx.Tx) string {
	c := tx.Conn()
	if c == nil || c.Config() == nil {
		return "postgres"
	}
	cfg := c.Config()
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
