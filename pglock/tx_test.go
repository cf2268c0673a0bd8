package pglock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/pglock"
)

func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(testCtx(t))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

// testTx is a transaction of one of the two APIs the transaction locks
// take: pgx (TryLockTx, LockTx) or database/sql (TryLockSQLTx, LockSQLTx).
type testTx interface {
	tryLock(ctx context.Context, k pglock.Key) (uint64, error)
	lock(ctx context.Context, k pglock.Key) (uint64, error)
	exec(ctx context.Context, sql string) error
	commit() error
	rollback() error
}

type pgxTestTx struct{ tx pgx.Tx }

func (t pgxTestTx) tryLock(ctx context.Context, k pglock.Key) (uint64, error) {
	return pglock.TryLockTx(ctx, t.tx, k)
}
func (t pgxTestTx) lock(ctx context.Context, k pglock.Key) (uint64, error) {
	return pglock.LockTx(ctx, t.tx, k)
}
func (t pgxTestTx) exec(ctx context.Context, sql string) error {
	_, err := t.tx.Exec(ctx, sql)
	return err
}
func (t pgxTestTx) commit() error   { return t.tx.Commit(context.Background()) }
func (t pgxTestTx) rollback() error { return t.tx.Rollback(context.Background()) }

type sqlTestTx struct{ tx *sql.Tx }

func (t sqlTestTx) tryLock(ctx context.Context, k pglock.Key) (uint64, error) {
	return pglock.TryLockSQLTx(ctx, t.tx, k)
}
func (t sqlTestTx) lock(ctx context.Context, k pglock.Key) (uint64, error) {
	return pglock.LockSQLTx(ctx, t.tx, k)
}
func (t sqlTestTx) exec(ctx context.Context, sql string) error {
	_, err := t.tx.ExecContext(ctx, sql)
	return err
}
func (t sqlTestTx) commit() error   { return t.tx.Commit() }
func (t sqlTestTx) rollback() error { return t.tx.Rollback() }

// txAPIs run a test over each API; begin starts a transaction that is
// rolled back when the test ends, if it is still open.
func txAPIs(t *testing.T, test func(t *testing.T, begin func() testTx)) {
	t.Run("pgx", func(t *testing.T) {
		pool := shared.Pool(t, 4)
		test(t, func() testTx { return pgxTestTx{begin(t, pool)} })
	})
	t.Run("database/sql", func(t *testing.T) {
		db := shared.SQLDB(t)
		test(t, func() testTx {
			tx, err := db.BeginTx(testCtx(t), nil)
			if err != nil {
				t.Fatalf("BeginTx: %v", err)
			}
			t.Cleanup(func() { tx.Rollback() })
			return sqlTestTx{tx}
		})
	})
}

// A transaction lock excludes other transactions and session locks, is
// released by commit and by rollback, and its fences increase with every
// grant, rolled back or not; the same on pgx and on database/sql (pgx's
// stdlib driver).
func TestTxLock(t *testing.T) {
	txAPIs(t, func(t *testing.T, begin func() testTx) {
		name := uniqueKey(t)
		k := pglock.HashKey(name)

		tx1 := begin()
		f1, err := tx1.tryLock(testCtx(t), k)
		if err != nil {
			t.Fatalf("TryLockTx: %v", err)
		}
		tx2 := begin()
		_, err = tx2.tryLock(testCtx(t), k)
		wantIs(t, err, dlock.ErrNotAcquired)
		locker := newLocker(t, 2)
		_, err = locker.TryAcquire(testCtx(t), name, time.Second)
		wantIs(t, err, dlock.ErrNotAcquired)

		if err := tx1.commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		// tx2 is still usable after a refused try (no error was raised).
		f2, err := tx2.tryLock(testCtx(t), k)
		if err != nil {
			t.Fatalf("TryLockTx after the holder committed: %v", err)
		}
		if f2 <= f1 {
			t.Fatalf("fence %d after commit not above %d", f2, f1)
		}
		if err := tx2.rollback(); err != nil {
			t.Fatalf("Rollback: %v", err)
		}

		// Rolled back: the lock is free, and the fence drawn in tx2 is not
		// handed out again (the sequence is not transactional).
		lock := lockcheck.MustAcquire(t, locker, name, time.Second)
		if lock.Fence() <= f2 {
			t.Fatalf("session fence after a rolled-back tx lock: %d, want above %d (never handed out twice)", lock.Fence(), f2)
		}
		tx3 := begin()
		_, err = tx3.tryLock(testCtx(t), k)
		wantIs(t, err, dlock.ErrNotAcquired)
		tx3.rollback()
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}

		// The two-int4 form works inside transactions too.
		tx4 := begin()
		if _, err := tx4.lock(testCtx(t), pglock.KeyPair(3, 4)); err != nil {
			t.Fatalf("LockTx(KeyPair): %v", err)
		}
		holderPID(t, pglock.KeyPair(3, 4))
		tx4.commit()
	})
}

// LockTx waits in the server's queue and gets the lock as soon as the holder
// commits; a wait that ends with its context leaves no waiter behind; the
// same on pgx and on database/sql.
func TestLockTxWaits(t *testing.T) {
	txAPIs(t, func(t *testing.T, begin func() testTx) {
		k := pglock.HashKey(uniqueKey(t))
		holder := begin()
		if _, err := holder.lock(testCtx(t), k); err != nil {
			t.Fatalf("LockTx: %v", err)
		}

		// The context ends the wait.
		waiter := begin()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		_, err := waiter.lock(ctx, k)
		cancel()
		wantIs(t, err, dlock.ErrNotAcquired, context.DeadlineExceeded)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("a 200ms wait took %v", d)
		}
		waitFor(t, "the cancelled waiter to leave pg_locks", func() bool {
			locks, err := shared.AdvisoryLocks(testCtx(t))
			return err == nil && len(locks) == 1 && locks[0].Granted
		})

		// lock_timeout in the transaction ends it too, as ErrNotAcquired.
		waiter2 := begin()
		if err := waiter2.exec(testCtx(t), "SET LOCAL lock_timeout = '100ms'"); err != nil {
			t.Fatal(err)
		}
		_, err = waiter2.lock(testCtx(t), k)
		wantIs(t, err, dlock.ErrNotAcquired)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("lock_timeout reported as a context error: %v", err)
		}
		waiter2.rollback()

		// A waiter is granted the lock when the holder commits.
		got := make(chan error, 1)
		waiter3 := begin()
		go func() {
			_, err := waiter3.lock(testCtx(t), k)
			got <- err
		}()
		waitFor(t, "the waiter to queue", func() bool {
			locks, err := shared.AdvisoryLocks(testCtx(t))
			return err == nil && len(locks) == 2
		})
		committed := time.Now()
		if err := holder.commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiting LockTx: %v", err)
		}
		t.Logf("waiter granted %v after the commit", time.Since(committed))
		waiter3.commit()
	})
}

// F22: two transactions take keys in opposite order; PostgreSQL aborts one
// of them after deadlock_timeout, and pglock says so with ErrDeadlock.
func TestDeadlock(t *testing.T) {
	pool := shared.Pool(t, 4)
	k1, k2 := pglock.HashKey(uniqueKey(t)), pglock.HashKey(uniqueKey(t))
	txA, txB := begin(t, pool), begin(t, pool)
	if _, err := pglock.LockTx(testCtx(t), txA, k1); err != nil {
		t.Fatal(err)
	}
	if _, err := pglock.LockTx(testCtx(t), txB, k2); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for _, c := range []struct {
		tx pgx.Tx
		k  pglock.Key
	}{{txA, k2}, {txB, k1}} {
		wg.Go(func() {
			_, err := pglock.LockTx(testCtx(t), c.tx, c.k)
			if err != nil {
				c.tx.Rollback(context.Background()) // lets the other through
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var deadlocks, ok int
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, pglock.ErrDeadlock):
			wantIs(t, err, dlock.ErrNotAcquired)
			deadlocks++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if deadlocks != 1 || ok != 1 {
		t.Fatalf("opposite-order locking: %d deadlock errors, %d grants; want 1 and 1", deadlocks, ok)
	}
	txA.Rollback(testCtx(t))
	txB.Rollback(testCtx(t))
}

// Bad input to the transaction functions is refused before anything is
// sent.
func TestTxBadInput(t *testing.T) {
	pool := shared.Pool(t, 1)
	tx := begin(t, pool)
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := pglock.TryLockTx(nil, tx, pglock.Int64Key(1)); !errors.Is(err, dlock.ErrInvalid) { //nolint:staticcheck
		t.Errorf("nil ctx: %v", err)
	}
	if _, err := pglock.TryLockTx(testCtx(t), nil, pglock.Int64Key(1)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil tx: %v", err)
	}
	var nilSQLTx *sql.Tx
	if _, err := pglock.LockSQLTx(testCtx(t), nilSQLTx, pglock.Int64Key(1)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil *sql.Tx: %v", err)
	}
	if _, err := pglock.TryLockSQLTx(testCtx(t), nil, pglock.Key{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil *sql.Tx, zero key: %v", err)
	}
	if _, err := pglock.LockTx(testCtx(t), tx, pglock.Key{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("zero key: %v", err)
	}
	// Nothing was sent: the transaction is still usable.
	if _, err := pglock.TryLockTx(testCtx(t), tx, pglock.Int64Key(1)); err != nil {
		t.Fatalf("TryLockTx after refused input: %v", err)
	}
}

// F21: cancel at random moments, many times; whatever raced with the grant,
// pg_locks ends up with no advisory lock and no waiter.
func TestCancellationRaces(t *testing.T) {
	// MinConns: the pool replaces a discarded connection in the background,
	// so most attempts start on a warm connection and the cancellation
	// points fall around the statement, not the dial.
	cfg := shared.PoolConfig(6)
	cfg.MinConns = 6
	lpool, err := pgxpool.NewWithConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lpool.Close)
	l, err := pglock.New(lpool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	name := uniqueKey(t)
	pool := shared.Pool(t, 4)
	// Cancel around the moment of the grant: the window shrinks after a
	// grant and grows after a cut, so it settles on the race's edge.
	window := time.Millisecond
	// At least 120 rounds, and more (up to 600) until both outcomes were
	// seen: on a loaded machine the edge of the race moves.
	var granted, cancelled, busy int
	for round := 0; round < 600 && (round < 120 || granted == 0 || cancelled == 0); round++ {
		ctx, cancel := context.WithTimeout(context.Background(), rand.N(2*window)+1)
		lock, err := l.TryAcquire(ctx, name, 10*time.Second)
		cancel()
		switch {
		case err == nil:
			granted++
			window = window * 9 / 10
			if err := lock.Release(testCtx(t)); err != nil {
				t.Fatalf("Release: %v", err)
			}
		case errors.Is(err, dlock.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
			cancelled++
			window = window * 11 / 10
		case errors.Is(err, dlock.ErrNotAcquired):
			// The session of an attempt cancelled just after its grant
			// holds the lock until the server sees its connection close;
			// wait for that, so one such grant does not spoil the rounds
			// after it.
			busy++
			if left, err := shared.WaitNoAdvisoryLocks(testCtx(t)); err != nil {
				t.Fatalf("lock of a cut-short grant never freed: %v %+v", err, left)
			}
		default:
			t.Fatalf("TryAcquire: %v", err)
		}
	}
	if granted == 0 || cancelled == 0 {
		t.Fatalf("%d granted, %d cut short: the cancellation points missed the window (%v)", granted, cancelled, window)
	}
	t.Logf("session locks: %d granted, %d cut short, %d busy (a cut-short grant not yet freed)", granted, cancelled, busy)

	// Blocking waits in a transaction, cancelled while the holder lets go.
	k := pglock.HashKey(name)
	for i := range 30 {
		holder := begin(t, pool)
		if _, err := pglock.LockTx(testCtx(t), holder, k); err != nil {
			t.Fatalf("round %d: holder: %v", i, err)
		}
		waiter := begin(t, pool)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.N(5000))*time.Microsecond)
		done := make(chan error, 1)
		go func() {
			_, err := pglock.LockTx(ctx, waiter, k)
			done <- err
		}()
		time.Sleep(time.Duration(rand.N(5000)) * time.Microsecond)
		holder.Commit(testCtx(t))
		err := <-done
		cancel()
		if err != nil && !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("round %d: waiter: %v", i, err)
		}
		waiter.Rollback(testCtx(t))
	}
	if left, err := shared.WaitNoAdvisoryLocks(testCtx(t)); err != nil {
		t.Fatalf("advisory locks left after cancelled acquisitions: %+v (%v)", left, err)
	}
}

// The fence sequence is never created behind the user's back: without it,
// an acquisition fails with ErrNotMigrated and holds nothing; Migrate fixes
// it and is idempotent.
func TestNotMigrated(t *testing.T) {
	ctx := testCtx(t)
	db := strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	if err := shared.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	cfg := shared.PoolConfig(2)
	cfg.ConnConfig.Database = db
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		shared.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)")
	})
	l, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.TryAcquire(ctx, "x", time.Second)
	wantIs(t, err, dlock.ErrMisconfigured, pglock.ErrNotMigrated)
	_, err = dlock.Semaphore(l, 2).TryAcquire(ctx, "s", time.Second)
	wantIs(t, err, dlock.ErrMisconfigured, pglock.ErrNotMigrated)
	tx := begin(t, pool)
	_, err = pglock.TryLockTx(ctx, tx, pglock.HashKey("x"))
	wantIs(t, err, dlock.ErrMisconfigured, pglock.ErrNotMigrated)
	tx.Rollback(ctx)
	sqlDB := stdlib.OpenDB(*cfg.ConnConfig)
	defer sqlDB.Close()
	stx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pglock.TryLockSQLTx(ctx, stx, pglock.HashKey("x"))
	wantIs(t, err, dlock.ErrMisconfigured, pglock.ErrNotMigrated)
	stx.Rollback()
	if left, err := shared.WaitNoAdvisoryLocks(ctx); err != nil {
		t.Fatalf("a failed acquisition left a lock: %+v (%v)", left, err)
	}

	for range 2 {
		if err := pglock.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	lock, err := l.TryAcquire(ctx, "x", time.Second)
	if err != nil {
		t.Fatalf("after Migrate: %v", err)
	}
	if lock.Fence() != 1 {
		t.Fatalf("first fence from a fresh sequence: %d, want 1", lock.Fence())
	}
	lock.Release(ctx)
	permit, err := dlock.Semaphore(l, 2).TryAcquire(ctx, "s", time.Second)
	if err != nil {
		t.Fatalf("a permit after Migrate: %v", err)
	}
	permit.Release(ctx)
}

// A hot standby's advisory locks exclude no one on the primary: pglock
// refuses to lock there, with ErrReadOnly.
func TestStandbyRefused(t *testing.T) {
	standby := shared.StartStandby(t)
	pool := standby.Pool(t, 2)
	l, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.TryAcquire(testCtx(t), uniqueKey(t), time.Second)
	wantIs(t, err, dlock.ErrMisconfigured, pglock.ErrReadOnly)
	tx := begin(t, pool)
	_, err = pglock.TryLockTx(testCtx(t), tx, pglock.HashKey(uniqueKey(t)))
	wantIs(t, err, dlock.ErrMisconfigured, pglock.ErrReadOnly)
	tx.Rollback(testCtx(t))
	// The session lock may have been granted before nextval refused; the
	// failed attempt closed its session, which gives it back.
	if locks, err := standby.WaitNoAdvisoryLocks(testCtx(t)); err != nil {
		t.Fatalf("standby pg_locks after refused acquisitions: %+v (%v)", locks, err)
	}
}

// F22: a full server lock table is reported as ErrOutOfLocks, not as busy.
func TestOutOfLocks(t *testing.T) {
	ctx := testCtx(t)
	l := newLocker(t, 2)
	// Connect first: a new session cannot even start with the table full.
	lockcheck.MustAcquire(t, l, uniqueKey(t), time.Second).Release(ctx)
	filler, err := pgx.Connect(ctx, shared.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close(context.Background()) // ends the session: frees its locks
	// Session locks survive the failing statement: the table stays full.
	start := time.Now()
	_, err = filler.Exec(ctx, "SELECT count(pg_advisory_lock(g)) FROM generate_series(1000000001, 1010000000) g")
	if !strings.Contains(errString(err), "53200") {
		t.Fatalf("filling the lock table: got %v, want SQLSTATE 53200", err)
	}
	t.Logf("lock table filled in %v", time.Since(start))
	_, err = l.TryAcquire(ctx, uniqueKey(t), time.Second)
	wantIs(t, err, dlock.ErrUnavailable, pglock.ErrOutOfLocks)
	if errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a full lock table reported as busy: %v", err)
	}
	filler.Close(ctx)
	// The next test needs the table empty, not merely being emptied.
	if left, err := shared.WaitNoAdvisoryLocks(ctx); err != nil {
		t.Fatalf("the filler's locks were not freed: %d left (%v)", len(left), err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// LockTx under REPEATABLE READ or SERIALIZABLE: the transaction's snapshot
// is taken by its first statement, LockTx's own, before the lock is
// granted, so what the previous holder committed while this one waited is
// invisible to it. Under READ COMMITTED the next statement sees it. (The
// package documentation says so, and how to avoid it.)
func TestLockTxSnapshot(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 3)
	const table = "lock_tx_snapshot"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (n int); INSERT INTO "+table+" VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Exec(context.Background(), "DROP TABLE "+table) })
	k := pglock.HashKey(uniqueKey(t))
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		holder := begin(t, pool)
		if _, err := pglock.LockTx(ctx, holder, k); err != nil {
			t.Fatal(err)
		}
		var committed int
		if err := holder.QueryRow(ctx, "UPDATE "+table+" SET n = n + 1 RETURNING n").Scan(&committed); err != nil {
			t.Fatal(err)
		}
		waiter, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { waiter.Rollback(context.Background()) })
		granted := make(chan error, 1)
		go func() {
			_, err := pglock.LockTx(ctx, waiter, k)
			granted <- err
		}()
		waitFor(t, "the waiter to queue for the lock", func() bool {
			locks, err := shared.AdvisoryLocks(ctx)
			if err != nil {
				return false
			}
			for _, l := range locks {
				if !l.Granted {
					return true
				}
			}
			return false
		})
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-granted; err != nil {
			t.Fatalf("%s: LockTx: %v", iso, err)
		}
		var seen int
		if err := waiter.QueryRow(ctx, "SELECT n FROM "+table).Scan(&seen); err != nil {
			t.Fatal(err)
		}
		stale := seen != committed
		t.Logf("%s: the previous holder committed n = %d; the new holder reads %d", iso, committed, seen)
		if want := iso != pgx.ReadCommitted; stale != want {
			t.Errorf("%s: stale read %v, want %v", iso, stale, want)
		}
		waiter.Rollback(ctx)
	}
}
