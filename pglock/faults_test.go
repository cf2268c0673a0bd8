package pglock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/pglock"
)

// proxiedLocker returns a Locker whose connections go through a proxy that
// can cut the network silently.
func proxiedLocker(t *testing.T, opts ...pglock.Option) (*pglock.Locker, *testproxy.Proxy) {
	t.Helper()
	proxy := testproxy.Start(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(shared.Port)))
	cfg := shared.PoolConfig(2)
	host, port, _ := net.SplitHostPort(proxy.Addr)
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := pglock.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, proxy
}

// F18: the holder's network goes silent while Do runs. The holder is told
// (ErrLockLost) within its ttl, because its health check cannot complete.
// Without a lease the server keeps the session, so nobody else gets the lock
// while the partition lasts (no double grant, no progress); once the link
// comes back the dead session is dropped and the lock is free. With a lease
// (WithSessionLease) the server frees it after ttl + margin, and always
// after the holder was told: the ordering that makes the handoff safe.
func TestSilentPartition(t *testing.T) {
	const ttl, margin = 500 * time.Millisecond, 500 * time.Millisecond
	for _, lease := range []bool{false, true} {
		name := "server-keeps-lock"
		if lease {
			name = "lease"
		}
		t.Run(name, func(t *testing.T) {
			var opts []pglock.Option
			if lease {
				opts = append(opts, pglock.WithSessionLease(margin))
			}
			a, proxy := proxiedLocker(t, opts...)
			b := newLocker(t, 2)
			key := uniqueKey(t)
			var cut, lostAt, grantedAt time.Time
			err := dlock.Do(testCtx(t), a, key, ttl, func(ctx context.Context) error {
				proxy.Blackhole(t)
				cut = time.Now()
				// B polls from the moment of the cut.
				deadline := cut.Add(2 * time.Second)
				for time.Now().Before(deadline) {
					if lb, err := b.TryAcquire(testCtx(t), key, time.Second); err == nil {
						grantedAt = time.Now()
						lb.Release(context.Background())
						break
					} else if !errors.Is(err, dlock.ErrNotAcquired) {
						t.Errorf("B: %v", err)
						break
					}
					if lostAt.IsZero() && ctx.Err() != nil {
						lostAt = time.Now()
					}
					time.Sleep(10 * time.Millisecond)
				}
				<-ctx.Done()
				if lostAt.IsZero() {
					lostAt = time.Now()
				}
				return nil
			})
			wantIs(t, err, dlock.ErrLockLost)
			if d := lostAt.Sub(cut); d > ttl+300*time.Millisecond {
				t.Fatalf("holder told %v after the cut; want within its ttl %v (+ slack)", d, ttl)
			}
			if !lease {
				if !grantedAt.IsZero() {
					t.Fatalf("B got the lock %v after the cut while the server still had A's session", grantedAt.Sub(cut))
				}
				proxy.Heal()
				lb, err := dlock.Acquire(testCtx(t), b, key, time.Second, dlock.WithRetryDelay(20*time.Millisecond))
				if err != nil {
					t.Fatalf("B after the link came back: %v", err)
				}
				lb.Release(testCtx(t))
				return
			}
			if grantedAt.IsZero() {
				t.Fatal("with a lease, the server never freed the partitioned holder's lock")
			}
			if !grantedAt.After(lostAt) {
				t.Fatalf("B got the lock %v before A was told it lost it", lostAt.Sub(grantedAt))
			}
			t.Logf("A told after %v, B granted after %v", lostAt.Sub(cut), grantedAt.Sub(cut))
		})
	}
}

// G11 negative controls: the two mistakes a PostgreSQL lock library can make
// with a pool, done by hand, and caught by the checks this package's tests
// rely on. A session lock is reentrant, so a second "holder" on the same
// connection is let in; and an unlock sent on another pooled connection
// unlocks nothing, leaving the lock held in pg_locks.
func TestNaiveMistakesAreCaught(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 2)
	k, _ := pglock.HashKey(uniqueKey(t)).Int64()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var first, second bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&second); err != nil {
		t.Fatal(err)
	}
	if !first || !second {
		t.Fatalf("same session locked twice: %v, %v; the reentrancy trap did not show", first, second)
	}

	var unlocked bool
	if err := pool.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&unlocked); err != nil {
		t.Fatal(err)
	}
	if unlocked {
		t.Fatal("an unlock on another pooled connection released the lock")
	}
	if locks, err := shared.AdvisoryLocks(ctx); err != nil || len(locks) != 1 {
		t.Fatalf("pg_locks after the misplaced unlock: %+v (%v); want the lock still there", locks, err)
	}
	// Clean up on the right session: two unlocks for two locks.
	for range 2 {
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&unlocked); err != nil || !unlocked {
			t.Fatalf("unlock on the holding session: %v, %v", unlocked, err)
		}
	}
}

// A health check cancelled in flight (dlock.Do cancels its last one when its
// function returns, right before releasing) finishes instead of closing the
// lock's session: the lock is still held, and the release succeeds.
func TestCancelledExtendKeepsLock(t *testing.T) {
	l, proxy := proxiedLocker(t)
	key := uniqueKey(t)
	lock := lockcheck.MustAcquire(t, l, key, 10*time.Second)
	proxy.Latency(t, 200*time.Millisecond, 0)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel) // while the check is in flight
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend cancelled in flight: %v", err)
	}
	proxy.Heal()
	holderPID(t, pglock.HashKey(key)) // fails unless the session still holds it
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("Release after a cancelled check: %v", err)
	}
}

// A health check or a release that times out mid-statement makes pgx close
// the connection, which ends the session and frees the lock at once: the
// lock is lost, not "maybe still held". Extend says so (ErrLockLost, the
// session ended) and keeps saying so, Release says the lock is not held,
// and another session gets the lock with a higher fence.
func TestTimedOutStatementLosesLock(t *testing.T) {
	for _, op := range []string{"extend", "release"} {
		t.Run(op, func(t *testing.T) {
			a, proxy := proxiedLocker(t)
			b := newLocker(t, 2)
			key := uniqueKey(t)
			lock, grant := recordGrant(t, a, key, 10*time.Second)
			proxy.Latency(t, 500*time.Millisecond, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			var err error
			want := dlock.ErrLockLost
			if op == "extend" {
				err = lock.Extend(ctx, 10*time.Second)
			} else {
				err = lock.Release(ctx)
				want = dlock.ErrNotHeld
			}
			wantOnly(t, err, want)
			wantSessionEnded(t, grant.err, want)
			proxy.Heal()

			actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer acancel()
			lb, err := dlock.Acquire(actx, b, key, time.Second, dlock.WithRetryDelay(20*time.Millisecond))
			if err != nil {
				t.Fatalf("another session after A's %s timed out: %v", op, err)
			}
			if lb.Fence() <= lock.Fence() {
				t.Errorf("fence %d after A's %d", lb.Fence(), lock.Fence())
			}
			defer lb.Release(context.Background())
			if op == "extend" {
				// Still lost while B holds the lock, and releasing it
				// touches nothing.
				wantOnly(t, lock.Extend(testCtx(t), 10*time.Second), dlock.ErrLockLost)
				wantOnly(t, lock.Release(testCtx(t)), dlock.ErrNotHeld)
			}
			if got := holderPID(t, pglock.HashKey(key)); got == 0 {
				t.Fatal("B's lock is gone")
			}
		})
	}
}

// wantSessionEnded checks that err matches want alone and says the
// session ended.
func wantSessionEnded(t *testing.T, err, want error) {
	t.Helper()
	wantSentinel(t, err, want)
	if !strings.Contains(err.Error(), "session ended") {
		t.Fatalf("error %q does not say the session ended", err)
	}
}
