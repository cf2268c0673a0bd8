package pglock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
)

// openSQL opens the shared database through database/sql and pgx's stdlib
// driver, as sqlx, GORM, ent and bun users do.
func openSQL(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", shared.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func beginSQL(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(testCtx(t), nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return tx
}

// Transaction locks on a *sql.Tx behave as on a pgx.Tx: they exclude other
// transactions (of either API) and session locks, end with commit or
// rollback, and draw growing fences.
func TestSQLTxLock(t *testing.T) {
	db := openSQL(t)
	pool := shared.Pool(t, 2)
	name := uniqueKey(t)
	k := pglock.HashKey(name)

	tx1 := beginSQL(t, db)
	f1, err := pglock.TryLockSQLTx(testCtx(t), tx1, k)
	if err != nil {
		t.Fatalf("TryLockSQLTx: %v", err)
	}
	tx2 := beginSQL(t, db)
	_, err = pglock.TryLockSQLTx(testCtx(t), tx2, k)
	wantIs(t, err, dlock.ErrNotAcquired)
	pgxTx := begin(t, pool)
	_, err = pglock.TryLockTx(testCtx(t), pgxTx, k)
	wantIs(t, err, dlock.ErrNotAcquired)
	pgxTx.Rollback(testCtx(t))
	locker := newLocker(t, 2)
	_, err = locker.TryAcquire(testCtx(t), name, time.Second)
	wantIs(t, err, dlock.ErrNotAcquired)

	if err := tx1.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	f2, err := pglock.TryLockSQLTx(testCtx(t), tx2, k)
	if err != nil || f2 <= f1 {
		t.Fatalf("TryLockSQLTx after the holder committed: fence %d after %d, %v", f2, f1, err)
	}
	if err := tx2.Rollback(); err != nil {
		t.Fatal(err)
	}
	lock := mustAcquire(t, locker, name, time.Second)
	if lock.Fence() <= f2 {
		t.Fatalf("session fence %d after a rolled-back *sql.Tx lock with fence %d", lock.Fence(), f2)
	}
	lock.Release(testCtx(t))

	tx3 := beginSQL(t, db)
	if _, err := pglock.LockSQLTx(testCtx(t), tx3, pglock.KeyPair(5, 6)); err != nil {
		t.Fatalf("LockSQLTx(KeyPair): %v", err)
	}
	holderPID(t, pglock.KeyPair(5, 6))
	tx3.Commit()
}

// LockSQLTx waits for the holder and gets the lock when it commits; a wait
// that ends with its context leaves no waiter behind; bad input is refused
// before anything is sent.
func TestLockSQLTxWaits(t *testing.T) {
	db := openSQL(t)
	k := pglock.HashKey(uniqueKey(t))
	holder := beginSQL(t, db)
	if _, err := pglock.LockSQLTx(testCtx(t), holder, k); err != nil {
		t.Fatalf("LockSQLTx: %v", err)
	}

	waiter := beginSQL(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err := pglock.LockSQLTx(ctx, waiter, k)
	cancel()
	wantIs(t, err, dlock.ErrNotAcquired, context.DeadlineExceeded)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a 200ms wait took %v", d)
	}
	waitFor(t, "the cancelled waiter to leave pg_locks", func() bool {
		locks, err := shared.AdvisoryLocks(testCtx(t))
		return err == nil && len(locks) == 1 && locks[0].Granted
	})

	got := make(chan error, 1)
	waiter2 := beginSQL(t, db)
	go func() {
		_, err := pglock.LockSQLTx(testCtx(t), waiter2, k)
		got <- err
	}()
	waitFor(t, "the waiter to queue", func() bool {
		locks, err := shared.AdvisoryLocks(testCtx(t))
		return err == nil && len(locks) == 2
	})
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting LockSQLTx: %v", err)
	}
	waiter2.Commit()

	var nilTx *sql.Tx
	if _, err := pglock.TryLockSQLTx(testCtx(t), nilTx, k); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil tx: %v", err)
	}
	tx := beginSQL(t, db)
	if _, err := pglock.LockSQLTx(testCtx(t), tx, pglock.Key{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("zero key: %v", err)
	}
	if _, err := pglock.TryLockSQLTx(testCtx(t), tx, k); err != nil {
		t.Fatalf("TryLockSQLTx after refused input: %v", err)
	}
}
