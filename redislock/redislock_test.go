package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/redislock"
)

var shared *testsrv.Redis

func TestMain(m *testing.M) {
	if testsrv.FuzzWorker() {
		os.Exit(m.Run()) // the fuzz targets need no server
	}
	dir, err := os.MkdirTemp("", "redislock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = testsrv.NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", shared.Addr) // for the examples
	code := m.Run()
	shared.Stop()
	os.RemoveAll(dir)
	if code == 0 {
		if err := testproxy.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newLocker(t *testing.T, c redis.UniversalClient, opts ...redislock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// userClient creates an ACL user allowed everything on srv and returns a
// client that logs in as it, so that a test can later take channels away
// from that client alone, or cut its connections (CLIENT KILL USER).
func userClient(t *testing.T, srv *testsrv.Redis, user string) *redis.Client {
	t.Helper()
	if err := srv.Client(t).Do(testCtx(t), "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = user, "pw"
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// proxiedClient returns a client whose connections to srv go through a new
// proxy, for injecting faults on that client alone. maxRetries is the
// client's redis.Options.MaxRetries (-1: none).
func proxiedClient(t *testing.T, srv *testsrv.Redis, maxRetries int) (*redis.Client, *testproxy.Proxy) {
	t.Helper()
	proxy := testproxy.Start(t, srv.Addr)
	opts := srv.Options()
	opts.Addr = proxy.Addr
	opts.MaxRetries = maxRetries
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c, proxy
}

func sharedFactory(opts ...redislock.Option) func(*testing.T) dlock.Locker {
	return func(t *testing.T) dlock.Locker { return newLocker(t, shared.Client(t), opts...) }
}

func delLapse(c redis.UniversalClient) locktest.Option {
	return locktest.WithLapse(func(t *testing.T, key string) {
		if err := c.Del(context.Background(), key).Err(); err != nil {
			t.Fatalf("DEL %s: %v", key, err)
		}
	})
}

func TestConformance(t *testing.T) {
	locktest.Run(t, sharedFactory(), delLapse(shared.Client(t)))
}

func TestFeaturesOnRedis7(t *testing.T) {
	l := newLocker(t, shared.Client(t))
	if n := l.Features(testCtx(t)); n != (rclient.Native{}) {
		t.Fatalf("redis-server 7 reported native commands %+v; it has none", n)
	}
}

// The basic scenario: one winner, the loser is refused, a wrong token
// cannot release, the right one can.
func TestSeedBasics(t *testing.T) {
	raw := shared.Client(t)
	a, b := newLocker(t, shared.Client(t)), newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	la, err := a.TryAcquire(testCtx(t), key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(testCtx(t), key, 30*time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("B while A holds: got %v, want ErrNotAcquired", err)
	}
	if err := b.ReleaseToken(testCtx(t), key, "not-my-token"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("release with a wrong token: got %v, want ErrNotHeld", err)
	}
	if got := raw.Get(testCtx(t), key).Val(); got != la.Token() {
		t.Fatalf("after a wrong-token release the key holds %q, want A's token", got)
	}
	if err := b.ExtendToken(testCtx(t), key, "not-my-token", time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("extend with a wrong token: got %v, want ErrNotHeld", err)
	}
	if pttl := raw.PTTL(testCtx(t), key).Val(); pttl > 30*time.Second {
		t.Fatalf("a stranger's extension changed the TTL to %v", pttl)
	}
	if err := a.ReleaseToken(testCtx(t), key, la.Token()); err != nil {
		t.Fatalf("release with A's token: %v", err)
	}
	if n := raw.Exists(testCtx(t), key).Val(); n != 0 {
		t.Fatal("key still there after the right release")
	}
}

// The classic expiry bug, both ways. A's 200ms lock expires while A works; B
// acquires; A releases; C arrives while B still works. With a plain DEL, A
// deletes B's lock and C gets in: two holders. With dlock's release, A is
// told it no longer holds the lock, B keeps it, C is refused.
func TestSeedExpiryBug(t *testing.T) {
	raw := shared.Client(t)
	scenario := func(t *testing.T, l *redislock.Locker, release func(a *dlock.Lock) error) (cGotIn, bStillHolds bool, releaseErr error) {
		key := lockcheck.Key(t)
		a, err := l.TryAcquire(testCtx(t), key, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // A is slow; its lock expired
		b, err := l.TryAcquire(testCtx(t), key, 30*time.Second)
		if err != nil {
			t.Fatalf("B after A's expiry: %v", err)
		}
		defer b.Release(context.Background())
		releaseErr = release(a)
		c, err := l.TryAcquire(testCtx(t), key, 30*time.Second)
		if err == nil {
			c.Release(context.Background())
		} else if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		return err == nil, raw.Get(testCtx(t), key).Val() == b.Token(), releaseErr
	}
	{
		l := newLocker(t, shared.Client(t))
		t.Run("PlainDEL", func(t *testing.T) {
			cIn, bHolds, _ := scenario(t, l, func(a *dlock.Lock) error { return raw.Del(testCtx(t), a.Key()).Err() })
			if !cIn || bHolds {
				t.Fatalf("plain DEL: C got in %v, B still holds %v; the anti-pattern should let C in", cIn, bHolds)
			}
		})
		t.Run("TokenChecked", func(t *testing.T) {
			cIn, bHolds, err := scenario(t, l, func(a *dlock.Lock) error { return a.Release(testCtx(t)) })
			if cIn || !bHolds {
				t.Fatalf("dlock release: C got in %v, B still holds %v; want false, true", cIn, bHolds)
			}
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("A's late release: got %v, want ErrNotHeld", err)
			}
		})
	}
}

// Fencing: B, who acquired after A's lock expired, carries a higher fence.
func TestSeedFenceGrows(t *testing.T) {
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	a, err := l.TryAcquire(testCtx(t), key, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // A stalls past its TTL
	b, err := l.TryAcquire(testCtx(t), key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
}

// A lock key written by another client (redsync, node-redlock: SET key value
// NX PX) excludes dlock, and dlock's key excludes them: same key, the value
// is the token, nothing else in that key.
func TestWireCompatibility(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t), redislock.WithPrefix("locks:"))
	key := lockcheck.Key(t)
	lock, err := l.TryAcquire(testCtx(t), key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Get(testCtx(t), "locks:"+key).Val(); got != lock.Token() {
		t.Fatalf("key locks:%s holds %q, want the token %q", key, got, lock.Token())
	}
	if ok := raw.SetNX(testCtx(t), "locks:"+key, "peer-token", 5*time.Second).Val(); ok {
		t.Fatal("a peer's SET NX succeeded while dlock held the key")
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if ok := raw.SetNX(testCtx(t), "locks:"+key, "peer-token", 5*time.Second).Val(); !ok {
		t.Fatal("a peer could not take the key after dlock released it")
	}
	if _, err := l.TryAcquire(testCtx(t), key, time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dlock while a peer holds the key: got %v, want ErrNotAcquired", err)
	}
	if n := raw.Exists(testCtx(t), keys.Fence("locks:"+key)).Val(); n != 1 {
		t.Fatal("fence counter not found at keys.Fence(lock key)")
	}
}

// Scripts run by SHA; a flushed script cache (or a restarted server) must
// fall back to EVAL and still give the true answer.
func TestScriptCacheFlushed(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	flush := func() {
		if err := raw.ScriptFlush(testCtx(t)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	lock, err := l.TryAcquire(testCtx(t), key, time.Second)
	if err != nil {
		t.Fatalf("acquire after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := lock.Extend(testCtx(t), 5*time.Second); err != nil {
		t.Fatalf("extend after SCRIPT FLUSH: %v", err)
	}
	if pttl := raw.PTTL(testCtx(t), key).Val(); pttl < 2*time.Second {
		t.Fatalf("extend did not reach the server: PTTL %v", pttl)
	}
	flush()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	if raw.Exists(testCtx(t), key).Val() != 0 {
		t.Fatal("release after SCRIPT FLUSH left the key")
	}
}

// Do must notice a lock taken behind its back (here: overwritten with
// another token) within about one extension interval.
func TestDoNoticesStolenLock(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	ttl := 400 * time.Millisecond
	var waited time.Duration
	err := dlock.Do(testCtx(t), l, key, ttl, func(ctx context.Context) error {
		raw.Set(testCtx(t), key, "someone-else", time.Minute)
		start := time.Now()
		select {
		case <-ctx.Done():
			waited = time.Since(start)
		case <-time.After(5 * time.Second):
			t.Error("fn's context still alive 5s after the lock was stolen")
		}
		return ctx.Err()
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do returned %v, want ErrLockLost", err)
	}
	if waited > ttl+200*time.Millisecond {
		t.Fatalf("loss noticed after %v; want within one extension interval (ttl %v)", waited, ttl)
	}
	if got := raw.Get(testCtx(t), key).Val(); got != "someone-else" {
		t.Fatalf("Do's release touched the new owner's key: %q", got)
	}
}

// Do extends a lock whose function outlives several TTLs, and another
// client stays refused all the while.
func TestDoExtendsLongWork(t *testing.T) {
	l, other := newLocker(t, shared.Client(t)), newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	ttl := 200 * time.Millisecond
	err := dlock.Do(testCtx(t), l, key, ttl, func(ctx context.Context) error {
		for range 5 {
			time.Sleep(ttl / 2)
			if _, err := other.TryAcquire(ctx, key, time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
				return fmt.Errorf("another client got in during Do: %v", err)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// WithMaxHold stops auto-extension: a function that outlives the cap loses
// its lock when the last validity runs out.
func TestDoMaxHold(t *testing.T) {
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	// Long enough that an extension delayed by a loaded machine (-race,
	// the other packages' servers) still lands: held beyond the first ttl
	// shows that the lock was extended, and the cap ends it.
	ttl := 400 * time.Millisecond
	start := time.Now()
	var heldFor time.Duration
	err := dlock.Do(testCtx(t), l, key, ttl, func(ctx context.Context) error {
		<-ctx.Done()
		heldFor = time.Since(start)
		return ctx.Err()
	}, dlock.WithMaxHold(time.Second))
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do past its hold limit returned %v, want ErrLockLost", err)
	}
	if heldFor < 500*time.Millisecond || heldFor > 3*time.Second {
		t.Fatalf("held %v with a 1s cap and a 400ms ttl", heldFor)
	}
}

func TestDoReturnsFnError(t *testing.T) {
	l := newLocker(t, shared.Client(t))
	boom := errors.New("boom")
	err := dlock.Do(testCtx(t), l, lockcheck.Key(t), time.Second, func(context.Context) error { return boom })
	if !errors.Is(err, boom) || errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("got %v, want just fn's error", err)
	}
}

func TestBadConfiguration(t *testing.T) {
	c := shared.Client(t)
	for name, fn := range map[string]func() error{
		"nil client":       func() error { _, err := redislock.New(nil); return err },
		"typed nil client": func() error { _, err := redislock.New((*redis.Client)(nil)); return err },
		"typed nil client of another type": func() error {
			_, err := redislock.New((*wrappedClient)(nil))
			return err
		},
		"nil option":     func() error { _, err := redislock.New(c, nil); return err },
		"NaN drift":      func() error { _, err := redislock.New(c, redislock.WithDriftFactor(math.NaN())); return err },
		"drift 1":        func() error { _, err := redislock.New(c, redislock.WithDriftFactor(1)); return err },
		"negative drift": func() error { _, err := redislock.New(c, redislock.WithDriftFactor(-0.1)); return err },
		"nil logger":     func() error { _, err := redislock.New(c, redislock.WithLogger(nil)); return err },
		"ttl below drift": func() error {
			_, err := newLocker(t, c).TryAcquire(testCtx(t), "k", 2*time.Millisecond)
			return err
		},
		"empty token": func() error { return newLocker(t, c).ReleaseToken(testCtx(t), "k", "") },
		"negative retry": func() error {
			_, err := dlock.Acquire(testCtx(t), newLocker(t, c), "k", time.Second, dlock.WithRetryCount(-2))
			return err
		},
	} {
		if err := fn(); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// wrappedClient is a client type of a user's own, as an instrumented
// wrapper would be.
type wrappedClient struct{ *redis.Client }

// Keys of the wrong type or without expiry (set by hand) give clear errors
// instead of an endless silent wait.
func TestForeignKeys(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	raw.LPush(testCtx(t), key, "x")
	if _, err := l.TryAcquire(testCtx(t), key, time.Second); err == nil || !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("WRONGTYPE key: got %v, want ErrMisconfigured naming the server's error", err)
	}
	key2 := lockcheck.Key(t)
	raw.Set(testCtx(t), key2, "by-hand", 0)
	_, err := l.TryAcquire(testCtx(t), key2, time.Second)
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "no expiry") {
		t.Fatalf("key without TTL: got %v, want ErrNotAcquired mentioning no expiry", err)
	}
	// A fence counter of the wrong type: the SET lands but no fence can be
	// drawn, so the attempt fails and gives the key back at once.
	key3 := lockcheck.Key(t)
	raw.LPush(testCtx(t), keys.Fence(key3), "x")
	if _, err := l.TryAcquire(testCtx(t), key3, time.Minute); !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("WRONGTYPE fence counter: got %v, want ErrMisconfigured", err)
	}
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if raw.Exists(testCtx(t), key3).Val() == 1 {
			return errors.New("the lock key of an attempt without a fence was left for its TTL")
		}
		return nil
	})
}

// A waiting Acquire rides out a server that is down for a moment.
func TestConformanceOutage(t *testing.T) {
	srv := testsrv.StartRedis(t)
	locktest.RunOutage(t, func(t *testing.T) dlock.Locker { return newLocker(t, srv.Client(t)) },
		func(t *testing.T) func() {
			srv.Kill()
			return func() {
				if err := srv.Restart(); err != nil {
					t.Error(err)
				}
			}
		})
}

// A loss after the caller's context was cancelled (Do keeps extending so
// that fn can finish) is still a loss: Do's error matches ErrLockLost.
func TestDoLossAfterCallerCancelled(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	err := dlock.Do(ctx, l, key, 400*time.Millisecond, func(ctx context.Context) error {
		cancel()
		raw.Set(testCtx(t), key, "someone-else", time.Minute)
		lockcheck.Eventually(t, 5*time.Second, func() error {
			if dlock.LockFromContext(ctx).Held() {
				return errors.New("still held")
			}
			return nil
		})
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do returned %v, want ErrLockLost", err)
	}
}

// fn releases the lock itself with a context already done: the outcome is
// unknown, the key expires and another owner takes it; fn's context must
// have ended by then, as a loss.
func TestDoOwnReleaseUnknownEndsAtValidity(t *testing.T) {
	l, other := newLocker(t, shared.Client(t)), newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	ttl := 400 * time.Millisecond
	err := dlock.Do(testCtx(t), l, key, ttl, func(ctx context.Context) error {
		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		if err := dlock.LockFromContext(ctx).Release(done); !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("Release with a done context: %v, want ErrUnavailable", err)
		}
		taken, err := dlock.Acquire(testCtx(t), other, key, 10*time.Second)
		if err != nil {
			t.Errorf("other owner: %v", err)
			return nil
		}
		defer taken.Release(testCtx(t))
		select {
		case <-ctx.Done():
		default:
			t.Error("fn's context alive while another owner holds the key")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", cause)
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do returned %v, want ErrLockLost", err)
	}
}
