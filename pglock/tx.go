package pglock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
)

// TryLockTx takes the transaction-level advisory lock on k inside tx, if no
// other session holds it, and draws the key's next fence in the same
// statement. The lock is released when tx commits or rolls back; there is
// no way to release it earlier and no handle to extend.
//
// The fence counter update is part of tx: a rollback undoes it, so the next
// holder gets the same number again. That is right for what tx locks are
// for, writes in the same transaction (they were undone too, and a fenced
// row written in tx still carries the older fence). To fence a resource
// outside the database, use a session lock (Locker), whose fences are never
// handed out twice.
//
// It returns an error matching dlock.ErrNotAcquired when another session
// holds k, and dlock.ErrUnavailable (with ErrNotMigrated or ErrReadOnly
// where that is the reason) or dlock.ErrInvalid otherwise. After an error
// other than ErrNotAcquired the transaction is aborted: roll it back.
func TryLockTx(ctx context.Context, tx pgx.Tx, k Key) (fence uint64, err error) {
	if err := checkTx(ctx, tx, k); err != nil {
		return 0, err
	}
	call, args, next := k.call("pg_try_advisory_xact_lock")
	var ok bool
	var f int64
	if err := tx.QueryRow(ctx, fenceSQL("SELECT "+call+" AS ok", next)+" FROM l", append(args, k.String())...).Scan(&ok, &f); err != nil {
		return 0, acquireErr(ctx, k.String(), txNode(tx), err)
	}
	if !ok {
		return 0, fmt.Errorf("dlock: acquire %q: %w (held by another session)", k.String(), dlock.ErrNotAcquired)
	}
	return uint64(f), nil
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
	// pg_advisory_xact_lock returns void: in FROM it yields one row once
	// the lock is granted.
	call, args, next := k.call("pg_advisory_xact_lock")
	var ok bool
	var f int64
	sql := fenceSQL("SELECT true AS ok FROM "+call, next) + " FROM l"
	if err := tx.QueryRow(ctx, sql, append(args, k.String())...).Scan(&ok, &f); err != nil {
		return 0, acquireErr(ctx, k.String(), txNode(tx), err)
	}
	return uint64(f), nil
}

func checkTx(ctx context.Context, tx pgx.Tx, k Key) error {
	switch {
	case ctx == nil:
		return dlock.Invalidf("nil context")
	case isNil(tx):
		return dlock.Invalidf("nil transaction")
	case !k.valid():
		return dlock.Invalidf("zero Key (build keys with HashKey, Int64Key or KeyPair)")
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
