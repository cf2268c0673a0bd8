package redlock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// slowPoll is the retry delay of the waiters below: a hand-off well under
// it can only come from a wake-up.
const slowPoll = 2 * time.Second

// waitQueued waits until key's waiter queue holds someone on at least want
// of the servers: the waiter is parked and queued for a wake-up.
func waitQueued(t *testing.T, rs []*testsrv.Redis, key string, want int) {
	t.Helper()
	lockcheck.Eventually(t, 10*time.Second, func() error {
		got := 0
		for _, r := range rs {
			c := probe(r)
			if n, err := c.ZCard(context.Background(), keys.Queue(key)).Result(); err == nil && n > 0 {
				got++
			}
			c.Close()
		}
		if got < want {
			return fmt.Errorf("the waiter queued on %d servers, want %d", got, want)
		}
		return nil
	})
}

// probe returns a client for one quick question to r: no retries, a
// short dial (r may be down).
func probe(r *testsrv.Redis) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
}

// holding returns how many of rs hold key (a node that does not answer
// holds nothing).
func holding(rs []*testsrv.Redis, key string) int {
	n := 0
	for _, r := range rs {
		c := probe(r)
		if k, err := c.Exists(context.Background(), key).Result(); err == nil && k > 0 {
			n++
		}
		c.Close()
	}
	return n
}

// handoffs has a waiter with a 2s poll interval wait for a lock that
// another Locker holds, releases it once the waiter is queued, and returns
// the time from the release call to the waiter's Acquire returning.
func handoffs(t *testing.T, rs []*testsrv.Redis, holder, waiter *redlock.Locker, rounds, queued int) []time.Duration {
	t.Helper()
	key := lockcheck.Key(t)
	var out []time.Duration
	for range rounds {
		// The waiter's release of the round before returned once a
		// majority deleted; let the rest finish, so the holder holds the
		// lock on every node that answers.
		waitNoKeys(t, rs, key, time.Second)
		lock := mustAcquire(t, holder, key, 5*time.Second)
		// The acquisition returned once a majority granted: on a busy
		// machine one node may have refused or timed out and not hold the
		// key, and the waiter can queue only where the key is held (it is
		// granted and dequeued elsewhere).
		held := holding(rs, key)
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			l, err := dlock.Acquire(testCtx(t), waiter, key, 5*time.Second, dlock.WithRetryDelay(slowPoll), dlock.WithRetryJitter(10*time.Millisecond))
			got <- time.Now()
			if err == nil {
				err = l.Release(context.Background())
			}
			errc <- err
		}()
		waitQueued(t, rs, key, min(queued, held))
		start := time.Now()
		if err := lock.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		d := (<-got).Sub(start)
		if err := <-errc; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		out = append(out, d)
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// A waiter polling every 2s takes the lock within about a round trip of
// its release: the release script on each node wakes the queue's head.
func TestWakeOnRelease(t *testing.T) {
	holder, waiter := newLocker(t, shared), newLocker(t, shared)
	defer waiter.Close()
	ds := handoffs(t, shared, holder, waiter, 7, len(shared))
	t.Logf("hand-offs: %v (median %v)", ds, median(ds))
	if m := median(ds); m >= 100*time.Millisecond {
		t.Fatalf("median hand-off %v; want under 100ms (poll interval %v)", m, slowPoll)
	}
}

// With 2 of 5 nodes down the three left still announce the release.
func TestWakeWithTwoNodesDown(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	holder, waiter := newLocker(t, rs), newLocker(t, rs)
	defer waiter.Close()
	// A new cluster gets its node markers while every node answers (see
	// TestNewClusterWithNodeDown).
	if err := mustAcquire(t, holder, lockcheck.Key(t)+":init", time.Second).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs[0].Kill()
	rs[3].Kill()
	live := []*testsrv.Redis{rs[1], rs[2], rs[4]} // the checks dial only these
	ds := handoffs(t, live, holder, waiter, 5, 3)
	t.Logf("hand-offs with 2 nodes down: %v (median %v)", ds, median(ds))
	if m := median(ds); m >= 100*time.Millisecond {
		t.Fatalf("median hand-off %v with 2 of 5 nodes down; want under 100ms", m)
	}
}

// A holder that crashed never releases: its keys expire, and nobody
// announces that. The waiter heads the queues, learned from its refused
// attempts when the keys expire, and retries then by itself, long before
// its poll.
func TestWakeAtExpiry(t *testing.T) {
	waiter := newLocker(t, shared)
	defer waiter.Close()
	key := lockcheck.Key(t)
	const ttl = 500 * time.Millisecond
	// The crashed holder's lock, on every node: never released.
	for _, c := range clients(t, shared) {
		if err := c.Set(testCtx(t), key, "crashed-holder", ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(testCtx(t), 3*time.Second)
	defer cancel()
	lock, err := dlock.Acquire(ctx, waiter, key, 5*time.Second, dlock.WithRetryDelay(5*time.Second), dlock.WithRetryJitter(0))
	if err != nil {
		t.Fatalf("waiter behind a lock that expires after %v, polling every 5s: %v", ttl, err)
	}
	defer lock.Release(context.Background())
	if d := time.Since(start); d < ttl-50*time.Millisecond || d > ttl+time.Second {
		t.Fatalf("waiter got the lock %v after the crashed holder's %v lock was set; want about its TTL", d, ttl)
	}
	if n := holding(shared, key); n < len(shared)/2+1 {
		t.Fatalf("the waiter's lock is on %d nodes", n)
	}
}

// A release that announces nothing (a peer's plain DEL on every node, as
// other Redlock clients release) is still seen by polling.
func TestWakeFallsBackToPolling(t *testing.T) {
	holder, waiter := newLocker(t, shared), newLocker(t, shared)
	defer waiter.Close()
	key := lockcheck.Key(t)
	mustAcquire(t, holder, key, 10*time.Second)
	const poll = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		l, err := dlock.Acquire(testCtx(t), waiter, key, 5*time.Second, dlock.WithRetryDelay(poll), dlock.WithRetryJitter(50*time.Millisecond))
		if err == nil {
			err = l.Release(context.Background())
		}
		done <- err
	}()
	waitQueued(t, shared, key, len(shared))
	for _, c := range clients(t, shared) {
		if err := c.Del(context.Background(), key).Err(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		t.Logf("acquired %v after a silent DEL (poll %v)", time.Since(start), poll)
	case <-time.After(10 * poll):
		t.Fatalf("the waiter did not take a lock deleted without announcement within %v", 10*poll)
	}
}

// 8 contenders, each polling only every second and woken by releases,
// never hold the lock two at once (a wake-up is only a hint: the woken
// waiter still has to win a majority), and hand it on sooner than any
// poll: a grant after a refused attempt within a second of the Acquire's
// start can only follow a wake-up. The test counts such grants, not holds
// in a fixed window: on a loaded machine a release that cannot reach a
// majority within the node timeout leaves the key until its 2s TTL (the
// release returns dlock.ErrUnavailable), which can take most of a fixed
// 3s window; here it only delays the count.
func TestWakeEightContenders(t *testing.T) {
	const (
		contenders = 8
		poll       = time.Second
		want       = 40
		deadline   = 30 * time.Second
	)
	var woken atomic.Int64
	enough := func(e dlock.Event) bool {
		return e.Kind == dlock.EventGranted && e.Attempts > 1 && e.Wait < poll && woken.Add(1) >= want
	}
	start := time.Now()
	holds := contend(t, contenders, deadline, true, enough, dlock.WithRetryDelay(poll), dlock.WithRetryJitter(poll/10))
	t.Logf("%d grants sooner than a poll (%d holds) in %v by %d contenders polling every %v", woken.Load(), len(holds), time.Since(start).Round(time.Millisecond), contenders, poll)
	if n := woken.Load(); n < want {
		t.Fatalf("only %d grants after a refused attempt came sooner than the %v poll in %v, want %d", n, poll, deadline, want)
	}
}

// Close ends every subscription; so does closing the clients without
// Close.
func TestWakeNoGoroutineLeft(t *testing.T) {
	for _, viaClose := range []bool{true, false} {
		before := goleak.IgnoreCurrent()
		cs := make([]redis.UniversalClient, len(shared))
		for i, r := range shared {
			cs[i] = redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
		}
		waiter, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		holder := newLocker(t, shared)
		ds := handoffs(t, shared, holder, waiter, 1, len(shared))
		if ds[0] >= slowPoll {
			t.Fatalf("hand-off took %v: no wake-up", ds[0])
		}
		if viaClose {
			if err := waiter.Close(); err != nil {
				t.Fatal(err)
			}
			if err := goleak.Find(before); err != nil {
				t.Fatalf("after Close: %v", err)
			}
		}
		for _, c := range cs {
			c.Close()
		}
		if err := goleak.Find(before); err != nil {
			t.Fatalf("after closing the clients (Close called: %v): %v", viaClose, err)
		}
		waiter.Close()
	}
}

// One waiter and a Locker that releases and at once takes the lock again,
// round after round: the release wakes the waiter, and the releaser lets
// it go first although the waiter was the only one queued.
func TestWokenSoleWaiterGoesFirst(t *testing.T) {
	releaser, waiter := newLocker(t, shared), newLocker(t, shared)
	defer releaser.Close()
	defer waiter.Close()
	key := lockcheck.Key(t)
	const rounds = 8
	first := 0
	for round := range rounds {
		waitNoKeys(t, shared, key, time.Second)
		lock, err := dlock.Acquire(testCtx(t), releaser, key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held := holding(shared, key)
		var waiterGot atomic.Bool
		errc := make(chan error, 1)
		go func() {
			l, err := dlock.Acquire(testCtx(t), waiter, key, 5*time.Second, dlock.WithRetryDelay(slowPoll), dlock.WithRetryJitter(10*time.Millisecond))
			if err == nil {
				waiterGot.Store(true)
				err = l.Release(context.Background())
			}
			errc <- err
		}()
		waitQueued(t, shared, key, held)
		if err := lock.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		again, err := dlock.Acquire(testCtx(t), releaser, key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if waiterGot.Load() {
			first++
		} else {
			t.Logf("round %d: the releaser took the lock again before the waiter it woke", round)
		}
		if err := again.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if first < rounds-1 {
		t.Fatalf("the woken waiter went first in %d of %d rounds, want at least %d", first, rounds, rounds-1)
	}
}

// dropQueuedReply is a client hook that loses the reply of the first
// acquire attempt that queues the Locker (the script with a queue key): the
// node ran it, the Locker gets a timeout.
type dropQueuedReply struct {
	fired chan struct{} // closed once it dropped a reply
	once  sync.Once
}

func (*dropQueuedReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*dropQueuedReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *dropQueuedReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if name := cmd.Name(); err != nil || (name != "evalsha" && name != "eval") || len(args) < 3 || fmt.Sprint(args[2]) != "3" {
			return err
		}
		dropped := false
		h.once.Do(func() { dropped = true; close(h.fired) })
		if !dropped {
			return err
		}
		err = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		cmd.SetErr(err)
		return err
	}
}

// A waiting attempt queues the Locker on every node but every reply is
// lost, and the wait ends before another attempt answers: leaving still
// takes the Locker out of every queue, so the next release wakes the next
// waiter at once.
func TestLostQueuedReplyLeavesNoEntry(t *testing.T) {
	holder, next := newLocker(t, shared), newLocker(t, shared)
	defer holder.Close()
	defer next.Close()
	cs := clients(t, shared)
	var drops []*dropQueuedReply
	for _, c := range cs {
		d := &dropQueuedReply{fired: make(chan struct{})}
		c.AddHook(d)
		drops = append(drops, d)
	}
	gone, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	key := lockcheck.Key(t)
	lock := mustAcquire(t, holder, key, 10*time.Second)
	held := holding(shared, key)
	ctx, cancel := context.WithCancel(testCtx(t))
	goneErr := make(chan error, 1)
	go func() {
		l, err := dlock.Acquire(ctx, gone, key, 5*time.Second, dlock.WithRetryDelay(slowPoll), dlock.WithRetryJitter(0))
		if err == nil {
			l.Release(context.Background())
			goneErr <- fmt.Errorf("a cancelled wait behind a held lock acquired it")
			return
		}
		goneErr <- nil
	}()
	waitQueued(t, shared, key, held) // the attempts whose replies were lost queued it
	for _, d := range drops {
		select {
		case <-d.fired:
		case <-time.After(time.Second):
		}
	}
	cancel()
	if err := <-goneErr; err != nil {
		t.Fatal(err)
	}
	lockcheck.Eventually(t, 3*time.Second, func() error {
		for _, r := range shared {
			c := probe(r)
			ids, _ := c.ZRange(context.Background(), keys.Queue(key), 0, -1).Result()
			c.Close()
			if len(ids) != 0 {
				return fmt.Errorf("queue on %s still holds %v after the only waiter left", r.Addr, ids)
			}
		}
		return nil
	})
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := dlock.Acquire(testCtx(t), next, key, 5*time.Second, dlock.WithRetryDelay(slowPoll), dlock.WithRetryJitter(0))
		got <- time.Now()
		if err == nil {
			err = l.Release(context.Background())
		}
		errc <- err
	}()
	waitQueued(t, shared, key, held)
	start := time.Now()
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := (<-got).Sub(start)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if d > time.Second {
		t.Fatalf("the next waiter got the lock %v after the release, with a %v poll interval", d, slowPoll)
	}
}
