package pglock

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// TryLockTx takes the transaction-level advisory lock on k inside tx, if no
// other session holds it, and draws a fence in the same statement. The lock
// ends with tx; there is no handle (see Transaction locks in the package
// documentation, also for why tx should be READ COMMITTED). Fence the
// writes tx makes itself; to fence a resource outside the database, use a
// session lock (Locker).
//
// It returns an error matching dlock.ErrNotAcquired when another session
// holds k, dlock.ErrMisconfigured when the server refused (with
// ErrNotMigrated or ErrReadOnly where that is the reason),
// dlock.ErrUnavailable when it could not be reached, or dlock.ErrInvalid.
// After an error other than ErrNotAcquired the transaction is aborted:
// roll it back.
func TryLockTx(ctx context.Context, tx pgx.Tx, k Key) (fence uint64, err error) {
	return lockTx(ctx, tx, k, &txTrySQL)
}

// LockTx is TryLockTx that waits, in the server's lock queue, while another
// session holds k. The wait ends with ctx (pgx then closes tx's
// connection, so no waiter or lock is left on the server, and tx is gone)
// or a lock_timeout set in tx.
//
// Besides TryLockTx's errors it returns one matching ErrDeadlock (and
// dlock.ErrNotAcquired) when PostgreSQL broke a deadlock by aborting this
// wait, ErrOutOfLocks when the server's lock table is full, and one matching
// dlock.ErrNotAcquired and ctx.Err() when ctx ended first.
func LockTx(ctx context.Context, tx pgx.Tx, k Key) (fence uint64, err error) {
	return lockTx(ctx, tx, k, &txWaitSQL)
}

// TryLockSQLTx is TryLockTx for a database/sql transaction on PostgreSQL
// (sqlx, GORM, ent and bun hand out the same *sql.Tx): the same lock,
// fence and errors with pgx's stdlib driver. pglock reads the server's
// reasons (ErrNotMigrated, ErrDeadlock, lock_timeout, ...) from pgx's
// *pgconn.PgError; through another driver, a server error matches
// dlock.ErrUnavailable only (never dlock.ErrMisconfigured).
//
// Only a transaction makes sense: outside one, each statement runs in a
// transaction of its own, which would end the lock as soon as it was
// granted. Session locks (Locker) pin a pgxpool.Pool's connection; they
// have no database/sql form.
func TryLockSQLTx(ctx context.Context, tx *sql.Tx, k Key) (fence uint64, err error) {
	return lockTx(ctx, tx, k, &txTrySQL)
}

// LockSQLTx is LockTx for a database/sql transaction (see TryLockSQLTx).
// When ctx ends the wait, pgx's stdlib driver closes the connection, as
// pgx does; tx is then unusable: roll it back.
func LockSQLTx(ctx context.Context, tx *sql.Tx, k Key) (fence uint64, err error) {
	return lockTx(ctx, tx, k, &txWaitSQL)
}

// sqlNode names the server in errors of a *sql.Tx, which does not say
// where it is.
const sqlNode = "postgres"

// The transaction-lock statements, for bigint keys and pairs, yield the
// fence, NULL when not granted. The waiting form calls
// pg_advisory_xact_lock (void) in FROM: the row exists once it is granted.
var txTrySQL, txWaitSQL [2]string

func init() {
	for i, pair := range []bool{false, true} {
		p, _ := keyParams(pair)
		txTrySQL[i] = `SELECT ` + fenceExpr(`pg_try_advisory_xact_lock`+p)
		txWaitSQL[i] = `SELECT ` + fenceExpr("") + ` FROM pg_advisory_xact_lock` + p
	}
}

// lockTx runs one of stmts in tx, a pgx.Tx or a *sql.Tx.
func lockTx(ctx context.Context, tx any, k Key, stmts *[2]string) (uint64, error) {
	switch {
	case ctx == nil:
		return 0, bridge.Invalidf("nil context")
	case nodeerr.IsNil(tx):
		return 0, bridge.Invalidf("nil transaction")
	case !k.valid():
		return 0, errZeroKey()
	}
	var f pgtype.Int8 // a sql.Scanner too
	var err error
	node := sqlNode
	switch tx := tx.(type) {
	case pgx.Tx:
		if c := tx.Conn(); c != nil && c.Config() != nil {
			node = nodeName(c.Config())
		}
		err = tx.QueryRow(ctx, stmts[k.form()], k.args(nil)...).Scan(&f)
	case *sql.Tx:
		err = tx.QueryRowContext(ctx, stmts[k.form()], k.args(nil)...).Scan(&f)
	}
	if err != nil {
		return 0, acquireErr(ctx, k.String(), node, err)
	}
	if !f.Valid {
		return 0, fmt.Errorf("dlock: acquire %q: %w (held by another session)", k.String(), dlock.ErrNotAcquired)
	}
	return uint64(f.Int64), nil
}
