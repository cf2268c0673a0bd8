package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/pglock"
)

// shared is the cluster every test of the package uses; tests never run in
// parallel, and each leaves no advisory lock behind (TestMain checks).
var shared *testsrv.Postgres

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if testsrv.FuzzWorker() {
		return m.Run() // the fuzz targets need no server
	}
	dir, err := os.MkdirTemp("", "pglock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	shared, err = testsrv.NewPostgres(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.Exec(ctx, pglock.MigrateSQL); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		return 1
	}

	os.Setenv("DATABASE_URL", shared.DSN()) // for the examples
	code := m.Run()

	// G10: no test may leave an advisory lock (or a waiter) behind.
	endCtx, endCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer endCancel()
	if left, err := shared.WaitNoAdvisoryLocks(endCtx); err != nil {
		fmt.Fprintf(os.Stderr, "advisory locks left in pg_locks after the tests: %+v (%v)\n", left, err)
		code = 1
	}
	shared.Stop()
	if code == 0 {
		if err := testproxy.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var keySeq atomic.Int64

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("pglock:%s:%d", t.Name(), keySeq.Add(1))
}

// newLocker returns a Locker over a pool of its own (maxConns connections),
// as a separate process would have.
func newLocker(t *testing.T, maxConns int32, opts ...pglock.Option) *pglock.Locker {
	t.Helper()
	l, err := pglock.New(shared.Pool(t, maxConns), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func wantIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("got error %v, want one matching %v", err, target)
		}
	}
}

// holderPID returns the pid of the session holding the advisory lock k.
func holderPID(t *testing.T, k pglock.Key) uint32 {
	t.Helper()
	locks, err := shared.AdvisoryLocks(testCtx(t))
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	for _, a := range locks {
		if !a.Granted {
			continue
		}
		if n, ok := k.Int64(); ok && a.ObjSubID == 1 && a.Int64() == n {
			return a.PID
		}
		if x, y, ok := k.Pair(); ok && a.ObjSubID == 2 && a.ClassID == uint32(x) && a.ObjID == uint32(y) {
			return a.PID
		}
	}
	t.Fatalf("no session holds %v; pg_locks: %+v", k, locks)
	return 0
}

// terminate ends the session that holds the lock on key (F17).
func terminate(t *testing.T, k pglock.Key) {
	t.Helper()
	if err := shared.Terminate(testCtx(t), holderPID(t, k)); err != nil {
		t.Fatalf("pg_terminate_backend: %v", err)
	}
}

func TestConformance(t *testing.T) {
	factory := func(t *testing.T) dlock.Locker { return newLocker(t, 4) }
	lapse := locktest.WithLapse(func(t *testing.T, key string) { terminate(t, pglock.HashKey(key)) })
	t.Run("Notify", func(t *testing.T) { locktest.Run(t, factory, lapse) })
	t.Run("Poll", func(t *testing.T) {
		locktest.Run(t, func(t *testing.T) dlock.Locker { return newLocker(t, 4, pglock.WithReleaseNotify(false)) }, lapse)
	})
	t.Run("HolderInfo", func(t *testing.T) {
		locktest.Run(t, func(t *testing.T) dlock.Locker { return newLocker(t, 4, pglock.WithHolderInfo("conformance")) }, lapse)
	})
}

// F17: a killed session is noticed by Do's next check, within one check
// interval (ttl minus the extend threshold), and the lock is free for others
// at once, with a higher fence.
func TestDoNoticesTerminatedSession(t *testing.T) {
	const ttl = time.Second // checks every 500ms
	a, b := newLocker(t, 2), newLocker(t, 2)
	key := uniqueKey(t)
	var lostAfter time.Duration
	var cause error
	var fenceA uint64
	err := dlock.Do(testCtx(t), a, key, ttl, func(ctx context.Context) error {
		fenceA = dlock.LockFromContext(ctx).Fence()
		terminate(t, pglock.HashKey(key))
		killed := time.Now()

		// The server released the lock with the session: B gets it now,
		// while A has not been told yet. B's attempt has a context of its
		// own: under load it can outlast A's next check, which ends ctx.
		lb, err := b.TryAcquire(testCtx(t), key, ttl)
		if err != nil {
			t.Errorf("B after the kill: %v", err)
		} else {
			if lb.Fence() <= fenceA {
				t.Errorf("B's fence %d not above A's %d", lb.Fence(), fenceA)
			}
			lb.Release(context.Background())
		}

		select {
		case <-ctx.Done():
			lostAfter, cause = time.Since(killed), context.Cause(ctx)
		case <-time.After(3 * ttl):
			t.Error("Do's context not cancelled within 3 ttl of the kill")
		}
		return nil
	})
	wantIs(t, cause, dlock.ErrLockLost)
	wantIs(t, err, dlock.ErrLockLost)
	if lostAfter > ttl/2+300*time.Millisecond {
		t.Fatalf("loss noticed %v after the kill; want within one check interval (%v) plus slack", lostAfter, ttl/2)
	}
	t.Logf("loss noticed %v after the kill", lostAfter)
}

// The handle of a killed session: Extend reports the lock lost, saying
// the session ended; Release reports ErrNotHeld, twice, and the handle is
// dead.
func TestHandleAfterTerminate(t *testing.T) {
	l := newLocker(t, 2)
	key := uniqueKey(t)
	lock, grant := recordGrant(t, l, key, 10*time.Second)
	terminate(t, pglock.HashKey(key))
	wantOnly(t, lock.Extend(testCtx(t), 10*time.Second), dlock.ErrLockLost)
	wantSessionEnded(t, grant.err, dlock.ErrLockLost)
	wantOnly(t, lock.Release(testCtx(t)), dlock.ErrNotHeld)
	wantOnly(t, lock.Release(testCtx(t)), dlock.ErrNotHeld)
	if lock.Held() {
		t.Fatal("handle of a killed session reports held")
	}

	// Release without an Extend first: the dead session is found there.
	lock2 := lockcheck.MustAcquire(t, l, key, 10*time.Second)
	terminate(t, pglock.HashKey(key))
	err := lock2.Release(testCtx(t))
	wantIs(t, err, dlock.ErrNotHeld)
	if !strings.Contains(err.Error(), "session ended") {
		t.Fatalf("release error does not say why: %v", err)
	}
	// The pool replaced the dead connections.
	lock3 := lockcheck.MustAcquire(t, l, key, time.Second)
	if err := lock3.Release(testCtx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Session locks are reentrant per session, so a Locker must never give a
// second holder the connection of the first: with one connection in the
// pool the second acquisition is refused at once with a clear error, and
// with more it is an ordinary contender.
func TestOneConnectionPerHolder(t *testing.T) {
	l := newLocker(t, 1)
	key := uniqueKey(t)
	lock := lockcheck.MustAcquire(t, l, key, 10*time.Second)

	start := time.Now()
	_, err := l.TryAcquire(testCtx(t), key, 10*time.Second)
	wantIs(t, err, dlock.ErrUnavailable, pglock.ErrPoolExhausted)
	if errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("pool exhaustion reported as busy: %v", err)
	}
	if !strings.Contains(err.Error(), "1 held locks pin all 1 connections") {
		t.Fatalf("message does not count the pinned connections: %v", err)
	}
	_, err = l.TryAcquire(testCtx(t), uniqueKey(t), 10*time.Second)
	wantIs(t, err, pglock.ErrPoolExhausted)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("exhausted pool took %v to refuse", d)
	}
	// Acquire does not wait on a full pool either.
	_, err = dlock.Acquire(testCtx(t), l, key, time.Second)
	wantIs(t, err, pglock.ErrPoolExhausted)

	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	again := lockcheck.MustAcquire(t, l, key, 10*time.Second)

	wide := newLocker(t, 3)
	lockcheck.MustAcquire(t, wide, uniqueKey(t), 10*time.Second)
	other := uniqueKey(t)
	lockcheck.MustAcquire(t, wide, other, 10*time.Second)
	_, err = wide.TryAcquire(testCtx(t), other, 10*time.Second)
	wantIs(t, err, dlock.ErrNotAcquired)
	_ = again
}

// A release wakes a waiter at once through NOTIFY, long before its next
// poll; without notifications the waiter polls.
func TestReleaseWakesWaiter(t *testing.T) {
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			a, b := newLocker(t, 2), newLocker(t, 2, pglock.WithReleaseNotify(notify))
			key := uniqueKey(t)
			la := lockcheck.MustAcquire(t, a, key, 10*time.Second)
			got := make(chan time.Time, 1)
			go func() {
				lock, err := dlock.Acquire(testCtx(t), b, key, 10*time.Second,
					dlock.WithRetryDelay(2*time.Second), dlock.WithRetryJitter(time.Millisecond))
				if err != nil {
					t.Errorf("Acquire: %v", err)
					got <- time.Time{}
					return
				}
				got <- time.Now()
				lock.Release(context.Background())
			}()
			time.Sleep(300 * time.Millisecond) // B is waiting, listener up
			released := time.Now()
			if err := la.Release(testCtx(t)); err != nil {
				t.Fatalf("Release: %v", err)
			}
			at := <-got
			if at.IsZero() {
				return
			}
			wait := at.Sub(released)
			t.Logf("waiter acquired %v after the release", wait)
			if notify && wait > 500*time.Millisecond {
				t.Fatalf("notified waiter took %v; want well under its 2s poll", wait)
			}
			if !notify && wait < 500*time.Millisecond {
				t.Fatalf("a polling waiter acquired %v after the release, before its poll: is the test measuring anything?", wait)
			}
		})
	}
}

// Bad input is refused before anything is sent, with ErrInvalid.
func TestBadInput(t *testing.T) {
	if _, err := pglock.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	pool := shared.Pool(t, 1)
	if _, err := pglock.New(pool, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil option: %v", err)
	}
	if _, err := pglock.New(pool, pglock.WithKeyFunc(nil)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil key func: %v", err)
	}
	l, err := pglock.New(pool, pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		var a, b int32
		if _, err := fmt.Sscanf(name, "tenant:%d:%d", &a, &b); err != nil {
			return pglock.Key{}, fmt.Errorf("lock name %q is not tenant:A:B", name)
		}
		return pglock.KeyPair(a, b), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.TryAcquire(testCtx(t), "invoice-7", time.Second)
	wantIs(t, err, dlock.ErrInvalid)
	if !strings.Contains(err.Error(), "invoice-7") {
		t.Errorf("message does not name the key: %v", err)
	}
	if _, err := l.ForKey(pglock.Key{}).TryAcquire(testCtx(t), pglock.Key{}.String(), time.Second); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("zero Key: %v", err)
	}
	if _, err := l.ForKey(pglock.KeyPair(1, 2)).TryAcquire(testCtx(t), pglock.KeyPair(1, 2).String(), 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("zero ttl: %v", err)
	}
	if err := pglock.Migrate(testCtx(t), nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Migrate(nil): %v", err)
	}
	var nilPool *pgxpool.Pool
	if err := pglock.Migrate(testCtx(t), nilPool); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Migrate(typed nil): %v", err)
	}
	if left := pool.Stat().AcquiredConns(); left != 0 {
		t.Fatalf("bad input left %d connections acquired", left)
	}
}

// WithKeyFunc maps names into the two-int4 key space; the lock is the same
// one psql takes with pg_advisory_lock(a, b).
func TestKeyFuncPairInterop(t *testing.T) {
	l := newLocker(t, 2, pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		var a, b int32
		if _, err := fmt.Sscanf(name, "tenant:%d:%d", &a, &b); err != nil {
			return pglock.Key{}, err
		}
		return pglock.KeyPair(a, b), nil
	}))
	lock := lockcheck.MustAcquire(t, l, "tenant:7:42", 10*time.Second)
	if lock.Key() != "tenant:7:42" {
		t.Fatalf("Key() = %q, want the caller's name", lock.Key())
	}
	holderPID(t, pglock.KeyPair(7, 42)) // fails unless pg_locks shows (7, 42)

	var got bool
	if err := shared.Pool(t, 1).QueryRow(testCtx(t), "SELECT pg_try_advisory_lock(7, 42)").Scan(&got); err != nil || got {
		t.Fatalf("psql-style pg_try_advisory_lock(7, 42) = %v, %v; want false (held)", got, err)
	}
	_, err := l.ForKey(pglock.KeyPair(7, 42)).TryAcquire(testCtx(t), pglock.KeyPair(7, 42).String(), time.Second)
	wantIs(t, err, dlock.ErrNotAcquired)
	// The bigint key with the same halves lives in a separate key space.
	same, err := l.ForKey(pglock.Int64Key(7<<32|42)).TryAcquire(testCtx(t), pglock.Int64Key(7<<32|42).String(), time.Second)
	if err != nil {
		t.Fatalf("bigint key (7<<32|42) while the pair (7, 42) is held: %v", err)
	}
	if err := same.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// F19 with a lease: a holder that stops checking (paused) loses the lock on
// the server after ttl + margin, never before its own validity ended; the
// next holder gets a higher fence and the paused handle is dead. A holder
// that keeps checking (Do) keeps the lock; after release the pooled
// connection is back to its own idle_session_timeout.
func TestSessionLease(t *testing.T) {
	const ttl, margin = 400 * time.Millisecond, 800 * time.Millisecond
	pool := shared.Pool(t, 1)
	a, err := pglock.New(pool, pglock.WithSessionLease(margin))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, 2)
	key := uniqueKey(t)

	lock, err := a.TryAcquire(testCtx(t), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	// The holder "pauses": no Extend. The server frees the lock.
	var freedAt time.Time
	waitFor(t, "the server to end the idle lock session", func() bool {
		locks, err := shared.AdvisoryLocks(testCtx(t))
		if err != nil || len(locks) != 0 {
			return false
		}
		freedAt = time.Now()
		return true
	})
	if freedAt.Before(lock.ValidUntil()) {
		t.Fatalf("server freed the lock %v before the holder's validity ended", lock.ValidUntil().Sub(freedAt))
	}
	lb := lockcheck.MustAcquire(t, b, key, time.Second)
	if lb.Fence() <= lock.Fence() {
		t.Fatalf("fence after the lease ran out: %d, not above %d", lb.Fence(), lock.Fence())
	}
	if lock.Held() {
		t.Fatal("the paused holder's handle still reports held")
	}
	err = lock.Extend(testCtx(t), ttl)
	if !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after the lease ran out: %v", err)
	}
	// The dead handle still pins its (closed) connection until released.
	wantIs(t, lock.Release(testCtx(t)), dlock.ErrNotHeld)
	if err := lb.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	// Do keeps checking, so the lease never runs out. Twice the TTL here:
	// each extension must land within a fraction of it, which a busy
	// machine running the whole suite under -race once missed at 400ms.
	const doTTL = 2 * ttl
	err = dlock.Do(testCtx(t), a, key, doTTL, func(ctx context.Context) error {
		for range 8 { // 4 leases long
			time.Sleep(doTTL / 2)
			if _, err := b.TryAcquire(ctx, key, time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
				return fmt.Errorf("another holder got in during Do: %v", err)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		t.Fatalf("Do with a lease: %v", err)
	}
	var timeout string
	if err := pool.QueryRow(testCtx(t), "SHOW idle_session_timeout").Scan(&timeout); err != nil || timeout != "0" {
		t.Fatalf("pooled connection after release: idle_session_timeout = %q (%v), want 0 again", timeout, err)
	}
	if _, err := pglock.New(pool, pglock.WithSessionLease(-time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("negative margin: %v", err)
	}
}

// A lease longer than idle_session_timeout can be (INT_MAX milliseconds,
// about 24.8 days, margin included) is refused up front with ErrInvalid,
// naming the numbers, by TryAcquire and by Extend, whose refusal leaves
// the lock held; the longest one accepted works.
func TestSessionLeaseLimit(t *testing.T) {
	const margin = time.Hour
	l := newLocker(t, 2, pglock.WithSessionLease(margin))
	key := uniqueKey(t)
	longest := math.MaxInt32*time.Millisecond - margin
	_, err := l.TryAcquire(testCtx(t), key, longest+time.Millisecond)
	wantSentinel(t, err, dlock.ErrInvalid)
	if !strings.Contains(err.Error(), "2147483648ms") || !strings.Contains(err.Error(), "2147483647ms") {
		t.Fatalf("the refusal does not name the numbers: %v", err)
	}
	lock, grant := recordGrant(t, l, key, longest)
	wantOnly(t, lock.Extend(testCtx(t), longest+time.Millisecond), dlock.ErrInvalid)
	wantSentinel(t, grant.err, dlock.ErrInvalid)
	if !lock.Held() {
		t.Fatal("a refused Extend ended the lock")
	}
	if err := lock.Extend(testCtx(t), longest); err != nil {
		t.Fatalf("Extend to the longest lease: %v", err)
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []time.Duration{math.MaxInt32 * time.Millisecond, math.MaxInt64} {
		_, err := pglock.New(shared.Pool(t, 1), pglock.WithSessionLease(m))
		wantSentinel(t, err, dlock.ErrInvalid)
	}
}

// A waiting Acquire rides out a database that is down for a moment.
func TestConformanceOutage(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	if err := pglock.Migrate(testCtx(t), pg.Pool(t, 2)); err != nil {
		t.Fatal(err)
	}
	// The test cluster does not flush commits; the outage is an immediate
	// shutdown, which would lose the sequence.
	if err := pg.Exec(testCtx(t), "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	locktest.RunOutage(t, func(t *testing.T) dlock.Locker {
		l, err := pglock.New(pg.Pool(t, 4))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}, func(t *testing.T) func() {
		pg.Stop()
		return func() {
			if err := pg.Restart(); err != nil {
				t.Error(err)
			}
		}
	})
}

// A pool whose connections are all pinned by the Locker's own locks is the
// same answer through every path: TryAcquire, dlock.Acquire and dlock.Do,
// on a name or on a Key (ForKey), fail at once with ErrPoolExhausted
// instead of waiting for a release that, for nested locks, never comes.
func TestPoolExhaustedEveryPath(t *testing.T) {
	l := newLocker(t, 1)
	held := lockcheck.MustAcquire(t, l, uniqueKey(t), 10*time.Second)
	defer held.Release(context.Background())
	k := pglock.KeyPair(-4, int32(keySeq.Add(1)))
	fn := func(context.Context) error { return errors.New("fn ran without the lock") }
	for name, try := range map[string]func(ctx context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, uniqueKey(t), time.Second); return err },
		"Acquire": func(ctx context.Context) error {
			_, err := dlock.Acquire(ctx, l, uniqueKey(t), time.Second)
			return err
		},
		"Do": func(ctx context.Context) error { return dlock.Do(ctx, l, uniqueKey(t), time.Second, fn) },
		"ForKey": func(ctx context.Context) error {
			_, err := l.ForKey(k).TryAcquire(ctx, k.String(), time.Second)
			return err
		},
		"Acquire ForKey": func(ctx context.Context) error {
			_, err := dlock.Acquire(ctx, l.ForKey(k), k.String(), time.Second)
			return err
		},
		"Do ForKey": func(ctx context.Context) error { return dlock.Do(ctx, l.ForKey(k), k.String(), time.Second, fn) },
	} {
		ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
		start := time.Now()
		err := try(ctx)
		cancel()
		wantIs(t, err, dlock.ErrUnavailable, pglock.ErrPoolExhausted)
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: a pool pinned by the Locker's own lock took %v to refuse: %v", name, d, err)
		}
	}
}
