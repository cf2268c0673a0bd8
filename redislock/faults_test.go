package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/redislock"
)

// A server that is not there: a typed error naming the node, at once.
func TestServerDown(t *testing.T) {
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	l := newLocker(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = l.TryAcquire(ctx, lockcheck.Key(t), time.Second)
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("got %v, want ErrUnavailable (and not ErrNotAcquired)", err)
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Node != addr {
		t.Fatalf("errors.As NodeError: %v, node %v; want node %s", err, ne, addr)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refused connection took %v to report", d)
	}
	// A waiting acquire retries an unreachable backend until its context
	// ends, and then reports it.
	if _, err := dlock.Acquire(ctx, l, lockcheck.Key(t), time.Second); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Acquire on a dead server: got %v, want ErrUnavailable", err)
	}
}

// A server that never answers (SIGSTOP), and a caller without a deadline:
// one try is one bounded try, the client's DialTimeout + ReadTimeout,
// whatever it sends (the holder record with the grant, the probe for the
// native commands before an extension or a release) and however often
// go-redis retries (MaxRetries 3 by default). The error is ErrUnavailable:
// the caller's context did not end.
func TestOneTryBounded(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	srv.Pause()
	defer srv.Resume()
	const dial, read = 500 * time.Millisecond, time.Second
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: dial, ReadTimeout: read, ContextTimeoutEnabled: true})
	defer c.Close()
	for name, l := range map[string]*redislock.Locker{
		"holder info": newLocker(t, c, redislock.WithHolderInfo("")),
		"probe":       newLocker(t, c),
	} {
		for op, call := range map[string]func() error{
			"TryAcquire":   func() error { _, err := l.TryAcquire(context.Background(), lockcheck.Key(t), time.Second); return err },
			"ExtendToken":  func() error { return l.ExtendToken(context.Background(), lockcheck.Key(t), "t", time.Second) },
			"ReleaseToken": func() error { return l.ReleaseToken(context.Background(), lockcheck.Key(t), "t") },
		} {
			start := time.Now()
			err := call()
			// 700ms is the margin of a loaded machine, below another read.
			if d := time.Since(start); d > dial+read+700*time.Millisecond {
				t.Errorf("%s, %s on a silent server took %v, want at most %v", name, op, d.Round(time.Millisecond), dial+read)
			}
			lockcheck.WantError(t, err, dlock.ErrUnavailable)
		}
	}
}

// A server that never answers (SIGSTOP): the call returns by the context
// deadline with an error matching ErrNotAcquired and DeadlineExceeded.
func TestServerNeverAnswers(t *testing.T) {
	srv := testsrv.StartRedis(t)
	l := newLocker(t, srv.Client(t))
	key := lockcheck.Key(t)
	lock, err := l.TryAcquire(testCtx(t), key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()

	// In this order: after a Release whose outcome is unknown the handle
	// is no longer held, and Extend is refused without asking the server.
	for _, o := range []struct {
		name string
		op   func(context.Context) error
	}{
		{"acquire", func(ctx context.Context) error {
			_, err := l.TryAcquire(ctx, lockcheck.Key(t), time.Second)
			return err
		}},
		{"extend", func(ctx context.Context) error { return lock.Extend(ctx, 5*time.Second) }},
		{"release", func(ctx context.Context) error { return lock.Release(ctx) }},
	} {
		name, op := o.name, o.op
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err := op(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want an error matching context.DeadlineExceeded", name, err)
		}
		if errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: a timeout was reported as a definite ErrNotHeld: %v", name, err)
		}
		if took > 800*time.Millisecond {
			t.Errorf("%s returned %v after a 300ms deadline", name, took)
		}
	}
	srv.Resume()
	// The failed release left the lock releasable: the retry succeeds.
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("retried release after the server came back: %v", err)
	}
}

// F14: Do with the server frozen. The function's context is cancelled with
// ErrLockLost by the validity deadline, although the extension request
// still hangs, and the handle never reports held again.
func TestDoServerFrozen(t *testing.T) {
	srv := testsrv.StartRedis(t)
	l := newLocker(t, srv.Client(t))
	ttl := 500 * time.Millisecond
	var lostAfter time.Duration
	var cause error
	err := dlock.Do(testCtx(t), l, lockcheck.Key(t), ttl, func(ctx context.Context) error {
		srv.Pause()
		start := time.Now()
		select {
		case <-ctx.Done():
			lostAfter, cause = time.Since(start), context.Cause(ctx)
		case <-time.After(5 * time.Second):
			t.Error("fn's context alive 5s after the server froze")
		}
		srv.Resume()
		return ctx.Err()
	})
	if !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("cause %v, Do error %v; want ErrLockLost", cause, err)
	}
	if lostAfter > ttl+150*time.Millisecond {
		t.Fatalf("loss signalled %v after the freeze; the validity was at most %v", lostAfter, ttl)
	}
}

// A Redis Cluster of three masters started by the harness: the suite runs
// through a go-redis ClusterClient, keys spread over the slots.
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes a few seconds")
	}
	addrs := testsrv.StartRedisCluster(t, 3)
	newClient := func(t *testing.T) *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	raw := newClient(t)
	locktest.Run(t, func(t *testing.T) dlock.Locker { return newLocker(t, newClient(t)) }, delLapse(raw))
}

// F16: the acquire reaches the server but its reply is lost. The caller gets
// an error, never a lock, and the library deletes the key it may have set,
// so the next client does not wait a whole TTL.
func TestLostReplyLeavesNoGhost(t *testing.T) {
	srv := testsrv.StartRedis(t)
	viaProxy, proxy := proxiedClient(t, srv, -1)
	l := newLocker(t, viaProxy)
	direct := srv.Client(t)
	key := lockcheck.Key(t)
	ttl := 10 * time.Second

	proxy.HoldReplies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	lock, err := l.TryAcquire(ctx, key, ttl)
	cancel()
	if err == nil || lock != nil {
		t.Fatalf("acquire with its reply lost returned a lock (%v)", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	// The SET landed: the key exists (or the cleanup already removed it).
	start := time.Now()
	for direct.Exists(testCtx(t), key).Val() == 1 {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("ghost key still there %v after the failed acquire (ttl %v)", time.Since(start), ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy.Heal()
	other := newLocker(t, direct)
	if _, err := other.TryAcquire(testCtx(t), key, time.Second); err != nil {
		t.Fatalf("next client after the ghost was removed: %v", err)
	}
}
