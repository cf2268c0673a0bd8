package pglock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/pglock"
)

func TestElection(t *testing.T) {
	lapse := locktest.WithLapse(func(t *testing.T, key string) { terminate(t, pglock.HashKey(key)) })
	t.Run("Notify", func(t *testing.T) {
		locktest.RunElection(t, func(t *testing.T) dlock.Locker { return newLocker(t, 4) }, lapse)
	})
	t.Run("Poll", func(t *testing.T) {
		locktest.RunElection(t, func(t *testing.T) dlock.Locker { return newLocker(t, 4, pglock.WithReleaseNotify(false)) }, lapse)
	})
	t.Run("HolderInfoAndLease", func(t *testing.T) {
		locktest.RunElection(t, func(t *testing.T) dlock.Locker {
			return newLocker(t, 4, pglock.WithHolderInfo("conformance"), pglock.WithSessionLease(time.Second))
		}, lapse)
	})
}

// appName returns the application_name of the session that holds the
// lock on key.
func appName(t *testing.T, key string) string {
	t.Helper()
	pid := holderPID(t, pglock.HashKey(key))
	var app string
	err := shared.Pool(t, 1).QueryRow(testCtx(t), `SELECT application_name FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&app)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return app
}

// A leader publishes its term and identity in its session's
// application_name, in the statement that takes the lock, where any
// session can read them: Leader names it, Inspect lists it. A name too
// long to fit leaves the term and the identity; release restores the
// session's application_name.
func TestElectionPublishesTerm(t *testing.T) {
	l, other := newLocker(t, 2), newLocker(t, 2)
	for _, name := range []string{uniqueKey(t), strings.Repeat("n", 40) + uniqueKey(t)} {
		var term dlock.Term
		err := dlock.Lead(testCtx(t), l, name, 10*time.Second, func(ctx context.Context) error {
			term, _ = dlock.TermFromContext(ctx)
			want := "#" + strconv.FormatUint(term.Fence, 10) + " replica-7"
			if len(name) < 40 {
				want = name + " (" + want + ")" // it fits: the name too
			}
			if got := appName(t, name); got != want {
				t.Errorf("application_name %q, want %q", got, want)
			}
			got, err := dlock.Leader(ctx, other, name)
			if err != nil || got.Leader != "replica-7" || got.Fence != term.Fence || !got.Led {
				t.Errorf("Leader from another Locker: %+v, %v; want replica-7 in term %d", got, err, term.Fence)
			}
			infos, err := other.Inspect(ctx, name, 0)
			if err != nil || len(infos) != 1 || infos[0].Fence != term.Fence || infos[0].Service != "replica-7" {
				t.Errorf("Inspect: %+v, %v; want the term %d and replica-7", infos, err, term.Fence)
			}
			if len(name) < 40 && (len(infos) != 1 || infos[0].Key != name) {
				t.Errorf("Inspect lists %+v, not by its name %q", infos, name)
			}
			return nil
		}, dlock.WithIdentity("replica-7"))
		if err != nil {
			t.Fatalf("Lead: %v", err)
		}
	}
}

// Release gives the session its own application_name back.
func TestElectionRestoresApplicationName(t *testing.T) {
	pool := shared.Pool(t, 1) // the lock's connection is the one the query gets
	l, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	var before, after string
	if err := pool.QueryRow(testCtx(t), `SELECT current_setting('application_name')`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := dlock.Lead(testCtx(t), l, uniqueKey(t), time.Second, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Lead: %v", err)
	}
	if err := pool.QueryRow(testCtx(t), `SELECT current_setting('application_name')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("application_name %q after the term, %q before", after, before)
	}
}

// An identity that application_name cannot carry beside the term is
// refused before anything is sent.
func TestElectionIdentityTooLong(t *testing.T) {
	l := newLocker(t, 2)
	fn := func(context.Context) error {
		t.Error("led with an identity PostgreSQL cannot show")
		return nil
	}
	for _, id := range []string{strings.Repeat("x", 43), "réplica"} {
		lockcheck.WantError(t, dlock.Lead(testCtx(t), l, uniqueKey(t), time.Second, fn, dlock.WithIdentity(id)), dlock.ErrInvalid)
	}
	if err := dlock.Lead(testCtx(t), l, uniqueKey(t), time.Second, func(context.Context) error { return nil },
		dlock.WithIdentity(strings.Repeat("x", 42))); err != nil {
		t.Fatalf("a 42-byte identity: %v", err)
	}
}

// recyclingPool returns a pool whose connections live 100ms: the health
// check destroys them as soon as they are idle that old.
func recyclingPool(t *testing.T) *pgxpool.Pool {
	cfg := shared.PoolConfig(4)
	cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter, cfg.HealthCheckPeriod = 100*time.Millisecond, 0, 20*time.Millisecond
	cfg.MinConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// E1: a leader whose pool recycles its connections (MaxConnLifetime)
// keeps leading on the connection its lock pins, alone: the other
// candidate never gets in and every reader names the same term. A backend
// terminated under the leader is a loss: the leader's function is told
// within one check, the other candidate leads with a higher term, and the
// old leader campaigns again instead of leading on.
func TestElectionRecycledAndTerminated(t *testing.T) {
	const ttl = time.Second // a check every 500ms
	poolA := recyclingPool(t)
	a, err := pglock.New(poolA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pglock.New(recyclingPool(t))
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueKey(t)

	var mu sync.Mutex
	var leading []string // "a:<term>" or "b:<term>" as each term begins
	enter := func(who string, ctx context.Context) {
		term, _ := dlock.TermFromContext(ctx)
		mu.Lock()
		defer mu.Unlock()
		leading = append(leading, who+":"+strconv.FormatUint(term.Fence, 10))
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	aLed, aLost, bLed, bResign := make(chan dlock.Term, 2), make(chan time.Time, 1), make(chan dlock.Term, 1), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		err := dlock.Lead(ctx, a, name, ttl, func(ctx context.Context) error {
			enter("a", ctx)
			term, _ := dlock.TermFromContext(ctx)
			aLed <- term
			<-ctx.Done()
			if errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
				aLost <- time.Now()
			}
			return nil
		}, dlock.WithIdentity("a"), dlock.WithRetryDelay(20*time.Millisecond))
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("a's Lead: %v", err)
		}
	})
	first := <-aLed
	wg.Go(func() {
		err := dlock.Lead(ctx, b, name, ttl, func(ctx context.Context) error {
			enter("b", ctx)
			term, _ := dlock.TermFromContext(ctx)
			bLed <- term
			<-bResign
			return nil
		}, dlock.WithIdentity("b"), dlock.WithRetryDelay(20*time.Millisecond))
		if err != nil {
			t.Errorf("b's Lead: %v", err)
		}
	})

	// Many connection lifetimes over: the pool recycles its idle
	// connections (a's reads go through them), never the pinned one; every
	// read names a as the leader.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		got, err := dlock.Leader(ctx, a, name)
		if err != nil || got.Leader != "a" || got.Fence != first.Fence {
			t.Fatalf("Leader while a leads: %+v, %v; want a in term %d", got, err, first.Fence)
		}
	}
	if n := poolA.Stat().MaxLifetimeDestroyCount(); n == 0 {
		t.Fatal("the pool recycled no connection: the test proves nothing")
	}

	terminate(t, pglock.HashKey(name))
	killed := time.Now()
	second := <-bLed
	if second.Fence <= first.Fence {
		t.Fatalf("b's term %d is not above a's %d", second.Fence, first.Fence)
	}
	lostAfter := (<-aLost).Sub(killed)
	if lostAfter > ttl/2+500*time.Millisecond {
		t.Errorf("a learned of its loss %v after its backend was terminated; want within one check (%v)", lostAfter, ttl/2)
	}
	t.Logf("a told %v after the termination; b led %v after it", lostAfter, time.Since(killed))
	close(bResign)
	third := <-aLed
	if third.Fence <= second.Fence {
		t.Fatalf("a's new term %d is not above b's %d", third.Fence, second.Fence)
	}
	cancel()
	wg.Wait()
	t.Logf("terms: %v", leading)
}

// Leader reads the holder again for a moment only when it catches it in
// the statement that takes the lock: a session that holds the lock
// without a term record and runs a long statement (another program's
// lock, a transaction's) is reported at once, with no term, not after its
// statement ends.
func TestLeaderOfBusySessionReturns(t *testing.T) {
	name := uniqueKey(t)
	pool := shared.Pool(t, 1)
	conn, err := pool.Acquire(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	params, args := keyParams(pglock.HashKey(name))
	if _, err := conn.Exec(testCtx(t), "SELECT pg_advisory_lock("+params+")", args...); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := conn.QueryRow(testCtx(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	slept := make(chan error, 1)
	go func() {
		_, err := conn.Exec(testCtx(t), "SELECT pg_sleep(5)")
		slept <- err
	}()
	defer func() {
		if err := <-slept; err != nil {
			t.Error(err)
		}
		if _, err := conn.Exec(testCtx(t), "SELECT pg_advisory_unlock_all()"); err != nil {
			t.Error(err)
		}
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		var state string
		err := shared.Pool(t, 1).QueryRow(testCtx(t), "SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state)
		if err == nil && state != "active" {
			err = errors.New("the holder's session is " + state)
		}
		return err
	})
	start := time.Now()
	term, err := dlock.Leader(testCtx(t), newLocker(t, 2), name)
	if took := time.Since(start); err != nil || !term.Led || term.Fence != 0 || took > 2*time.Second {
		t.Fatalf("Leader while the holder runs a long statement: %+v, %v after %v; want someone leads, at once", term, err, took)
	}
}

// An identity that application_name cannot carry is refused before a pool
// connection is pinned: at once when the pool is exhausted, and without
// closing a healthy connection when it is not. Semaphores too.
func TestIdentityTooLongPinsNothing(t *testing.T) {
	id := dlock.WithIdentity(strings.Repeat("x", 43))
	for _, c := range []struct {
		name    string
		exhaust func(t *testing.T, l *pglock.Locker, pool *pgxpool.Pool) func()
	}{
		{"free pool", func(*testing.T, *pglock.Locker, *pgxpool.Pool) func() { return func() {} }},
		{"pinned by a lock of the Locker", func(t *testing.T, l *pglock.Locker, _ *pgxpool.Pool) func() {
			held := lockcheck.MustAcquire(t, l, uniqueKey(t), 10*time.Second)
			return func() { _ = held.Release(context.Background()) }
		}},
		{"in use by another", func(t *testing.T, _ *pglock.Locker, pool *pgxpool.Pool) func() {
			conn, err := pool.Acquire(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			return conn.Release
		}},
	} {
		for _, sem := range []bool{false, true} {
			t.Run(c.name+map[bool]string{false: "", true: " semaphore"}[sem], func(t *testing.T) {
				pool := shared.Pool(t, 1)
				l, err := pglock.New(pool)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				if err := pool.Ping(testCtx(t)); err != nil { // one idle connection
					t.Fatal(err)
				}
				done := c.exhaust(t, l, pool)
				defer done()
				var locker dlock.Locker = l
				if sem {
					locker = dlock.Semaphore(l, 2)
				}
				before := pool.Stat()
				ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
				defer cancel()
				start := time.Now()
				lock, err := dlock.Acquire(ctx, locker, uniqueKey(t), time.Second, id)
				if err == nil {
					_ = lock.Release(context.Background())
				}
				d, after := time.Since(start), pool.Stat()
				if !errors.Is(err, dlock.ErrInvalid) || d > time.Second {
					t.Errorf("a 43-byte identity: err %v after %v; want ErrInvalid at once", err, d)
				}
				if after.AcquireCount() != before.AcquireCount() || after.TotalConns() != before.TotalConns() {
					t.Errorf("a refused identity pinned %d connections, the pool went from %d connections to %d",
						after.AcquireCount()-before.AcquireCount(), before.TotalConns(), after.TotalConns())
				}
			})
		}
	}
}

// A leader's statement takes the lock, then writes its term record: a
// Leader that catches it in between, as a loaded server can stretch that
// moment, reads again until the record is there instead of reporting a
// leader without a term.
func TestLeaderWaitsForTheRecordOfAGrantUnderWay(t *testing.T) {
	name := uniqueKey(t)
	ctx := testCtx(t)
	conn, err := shared.Pool(t, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	key, _ := pglock.HashKey(name).Int64()
	granting := make(chan error, 1)
	go func() {
		// One statement, as the acquiring one: the lock first, the record
		// 100ms later.
		_, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1), pg_sleep(0.1), set_config('application_name', '#77 slow-replica', false)`,
			key)
		granting <- err
	}()
	for shown := false; !shown; { // until the lock shows, record or not
		err := shared.Pool(t, 2).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND granted AND objsubid = 1 AND classid::int8 = ($1::int8 >> 32) & 4294967295 AND objid::int8 = $1::int8 & 4294967295)`, key).Scan(&shown)
		if err != nil {
			t.Fatal(err)
		}
	}
	term, err := dlock.Leader(ctx, newLocker(t, 2), name)
	if err != nil || !term.Led || term.Leader != "slow-replica" || term.Fence != 77 {
		t.Errorf("Leader: %+v, %v; want slow-replica in term 77", term, err)
	}
	if err := <-granting; err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock_all(), set_config('application_name', '', false)`); err != nil {
		t.Fatal(err)
	}
}
