package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// The Locker sends the scripts of concurrent calls on a single-node client
// together (internal/batch). These tests hold the replies back with a proxy
// to see what the batch does to each caller.

// slowLocker returns a Locker, and its client, whose replies come latency
// late (with a read timeout well above it). It uses the scripts (Redis 7
// has no native commands; the probe for them comes with its first
// release), loaded already, and its first connection is open: a new one
// takes round trips to set up. opts are the Locker's.
func slowLocker(t *testing.T, latency time.Duration, opts ...redislock.Option) (*redislock.Locker, *redis.Client) {
	t.Helper()
	proxy := testproxy.Start(t, shared.Addr)
	copts := shared.Options()
	copts.Addr = proxy.Addr
	copts.ReadTimeout = 10 * latency
	c := redis.NewClient(copts)
	t.Cleanup(func() { c.Close() })
	l := newLocker(t, c, opts...)
	lock, err := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// A client's first pipeline through the proxy took three times its
	// latency (no extra commands: MONITOR shows none); warm it first.
	if _, err := c.Pipelined(testCtx(t), func(p redis.Pipeliner) error { return p.Ping(testCtx(t)).Err() }); err != nil {
		t.Fatal(err)
	}
	proxy.Latency(t, latency, 0)
	return l, c
}

// inFlight starts a TryAcquire of key and returns once the server has run
// it (its reply still on the way); the channel gets its outcome. The key
// is deleted when the test ends.
func inFlight(t *testing.T, l *redislock.Locker, key string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(testCtx(t), key, 30*time.Second)
		done <- err
	}()
	waitKey(t, key, true)
	t.Cleanup(func() { shared.Client(t).Del(context.Background(), key) })
	return done
}

// waitKey waits until key exists on the server (or does not).
func waitKey(t *testing.T, key string, exists bool) {
	t.Helper()
	raw := shared.Client(t)
	lockcheck.Eventually(t, 10*time.Second, func() error {
		n, err := raw.Exists(testCtx(t), key).Result()
		if err == nil && (n == 1) != exists {
			err = fmt.Errorf("key %s: exists %v, want %v", key, n == 1, exists)
		}
		return err
	})
}

// Attempts made while another is in flight share its connection's next
// round trip: 32 concurrent attempts on their own keys use one connection,
// where one each would open the client's whole pool.
func TestConcurrentAttemptsShareAConnection(t *testing.T) {
	l, c := slowLocker(t, 200*time.Millisecond)
	base := lockcheck.Key(t)
	var wg sync.WaitGroup
	locks := make([]*dlock.Lock, 32)
	for i := range locks {
		wg.Go(func() {
			lock, err := l.TryAcquire(testCtx(t), fmt.Sprint(base, i), 30*time.Second)
			if err != nil {
				t.Error(err)
			}
			locks[i] = lock
		})
	}
	wg.Wait()
	if n := c.PoolStats().TotalConns; n > 2 {
		t.Errorf("32 concurrent attempts opened %d connections, want 1 (2 at most)", n)
	}
	for _, lock := range locks {
		if lock != nil {
			wg.Go(func() {
				if err := lock.Release(testCtx(t)); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

// An attempt waiting for the next batch leaves at its own deadline, and is
// never sent: its key and its fence counter are untouched.
func TestWaitingAttemptLeavesAtItsDeadline(t *testing.T) {
	l, _ := slowLocker(t, time.Second)
	first := inFlight(t, l, lockcheck.Key(t)+"first")
	key := lockcheck.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.TryAcquire(ctx, key, 30*time.Second)
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if took > 800*time.Millisecond {
		t.Fatalf("returned after %v with a 300ms deadline", took)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	raw := shared.Client(t)
	if n, err := raw.Exists(testCtx(t), key, keys.Fence(key)).Result(); err != nil || n != 0 {
		t.Fatalf("the attempt that left before sending touched %d of its keys (%v)", n, err)
	}
}

// An attempt whose deadline passes while its batch is in flight returns at
// its deadline; the server grants it, and the Locker gives the key back
// when the reply comes instead of leaving it held for its TTL.
func TestAttemptLeftInFlightGivesTheKeyBack(t *testing.T) {
	l, _ := slowLocker(t, time.Second)
	short := lockcheck.Key(t) + "short"
	leftInFlight(t, l, func(ctx context.Context) error {
		_, err := l.TryAcquire(ctx, short, 30*time.Second)
		return err
	})
	waitKey(t, short, false) // given back, long before its 30s TTL
}

// The same with a holder record (WithHolderInfo): it is written by the
// attempt's own script, so the attempt takes the same batch and gives its
// key back the same way.
func TestAttemptWithHolderLeftInFlightGivesTheKeyBack(t *testing.T) {
	l, _ := slowLocker(t, time.Second, redislock.WithHolderInfo("left"))
	short := lockcheck.Key(t) + "short"
	leftInFlight(t, l, func(ctx context.Context) error {
		_, err := l.TryAcquire(ctx, short, 30*time.Second)
		return err
	})
	waitKey(t, short, false) // given back, long before its 30s TTL
}

// leftInFlight runs try, with a 1.5s deadline, in the batch after the one
// in flight (slowLocker's replies come a second late), which a lock
// attempt with a later deadline sends, and checks that try returned at its
// deadline, not acquired, and that the batch's sender got its lock.
func leftInFlight(t *testing.T, l *redislock.Locker, try func(ctx context.Context) error) {
	t.Helper()
	first := inFlight(t, l, lockcheck.Key(t)+"first")
	long := lockcheck.Key(t) + "long"
	t.Cleanup(func() { shared.Client(t).Del(context.Background(), long) })
	longDone := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(testCtx(t), long, 30*time.Second)
		longDone <- err
	}()
	shortDone := make(chan error, 1)
	var took time.Duration
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := try(ctx)
		took = time.Since(start)
		shortDone <- err
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if n := l.BatchWaiting(); n != 2 {
			return fmt.Errorf("%d attempts wait for the next batch, want 2", n)
		}
		return nil
	})
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	err := <-shortDone
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("short deadline: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if took > 2*time.Second {
		t.Fatalf("short deadline: returned after %v with a 1.5s deadline", took)
	}
	if err := <-longDone; err != nil {
		t.Fatalf("the batch's sender: %v", err)
	}
}

// Calls sent together as one pipeline each keep the server's own reason
// when the connection's handshake is refused (a wrong password): go-redis
// leaves that error off the pipeline's commands.
func TestBatchKeepsServerReason(t *testing.T) {
	srv := testsrv.StartRedis(t)
	if err := srv.Client(t).ConfigSet(testCtx(t), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Password = "wrong"
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	l := newLocker(t, c)
	errs := make([]error, 32)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = l.TryAcquire(testCtx(t), fmt.Sprintf("%s:%d", lockcheck.Key(t), i), time.Second)
		})
	}
	wg.Wait()
	for _, err := range errs {
		var re redis.Error
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("a call of a batch refused at the handshake: %v, want the server's WRONGPASS", err)
		}
	}
}

// A permit attempt whose deadline passes while its script is in flight
// returns at its deadline; the server grants it a slot, and the Locker
// gives the slot back when the reply comes, as it does a lock's key,
// instead of leaving the permit held for its TTL.
func TestPermitLeftInFlightGivesTheSlotBack(t *testing.T) {
	l, _ := slowLocker(t, time.Second)
	warm, err := dlock.Semaphore(l, 2).TryAcquire(testCtx(t), lockcheck.Key(t), 10*time.Second) // loads its script
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	name := lockcheck.Key(t)
	slot := "{" + name + "}#0"
	t.Cleanup(func() { shared.Client(t).Del(context.Background(), slot, keys.Fence(slot)) })
	leftInFlight(t, l, func(ctx context.Context) error {
		_, err := dlock.Semaphore(l, 2).TryAcquire(ctx, name, 30*time.Second)
		return err
	})
	waitKey(t, keys.Fence(slot), true) // the server granted the slot
	waitKey(t, slot, false)            // and it was given back, long before its 30s TTL
}
