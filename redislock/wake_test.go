package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// waitQueued waits until the waiter queue of key holds n Lockers: a waiting
// Acquire joins it only once its Locker's subscription is confirmed, so
// this is the signal that a release will be announced to it.
func waitQueued(t *testing.T, raw redis.UniversalClient, key string, n int64) {
	t.Helper()
	q := keys.Queue(key)
	lockcheck.Eventually(t, 10*time.Second, func() error {
		got, err := raw.ZCard(context.Background(), q).Result()
		if err != nil {
			t.Fatalf("ZCARD %s: %v", q, err)
		}
		if got != n {
			return fmt.Errorf("waiter queue %s holds %d Lockers, want %d", q, got, n)
		}
		return nil
	})
}

type acquired struct {
	lock *dlock.Lock
	err  error
	at   time.Time
}

// waitFor starts a waiting Acquire in the background.
func waitFor(ctx context.Context, l *redislock.Locker, key string, opts ...dlock.Option) <-chan acquired {
	done := make(chan acquired, 1)
	go func() {
		lock, err := dlock.Acquire(ctx, l, key, 10*time.Second, opts...)
		done <- acquired{lock, err, time.Now()}
	}()
	return done
}

// slowPoll is a waiter's poll far above any hand-off: a waiter served
// within a second was woken, not polling.
var slowPoll = []dlock.Option{dlock.WithRetryDelay(5 * time.Second), dlock.WithRetryJitter(0)}

// queueBehind has holder take key and waiter (polling every 5s, in ctx)
// wait for it, and returns once waiter is queued.
func queueBehind(ctx context.Context, t *testing.T, raw redis.UniversalClient, holder, waiter *redislock.Locker, key string) (*dlock.Lock, <-chan acquired) {
	t.Helper()
	lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := waitFor(ctx, waiter, key, slowPoll...)
	waitQueued(t, raw, key, 1)
	return lock, done
}

// queuedHandOff queues waiter behind holder's lock on key (queueBehind) and
// returns handOff's duration.
func queuedHandOff(t *testing.T, raw redis.UniversalClient, holder, waiter *redislock.Locker, key string) time.Duration {
	t.Helper()
	lock, done := queueBehind(testCtx(t), t, raw, holder, waiter, key)
	return handOff(t, lock, done)
}

// handOff releases lock, waits for the waiter behind done to get the lock,
// releases that too, and returns the time from release to the waiter's grant.
func handOff(t *testing.T, lock *dlock.Lock, done <-chan acquired) time.Duration {
	t.Helper()
	start := time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("waiter: %v", got.err)
	}
	if err := got.lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return got.at.Sub(start)
}

func closeLocker(t *testing.T, l *redislock.Locker) {
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// A release wakes a waiter whose poll interval is 2s within a few
// milliseconds: the hand-off does not wait for the poll.
func TestWakeOnRelease(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	waiter := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := lockcheck.Key(t)
	var lat []time.Duration
	for range 5 {
		lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		done := waitFor(testCtx(t), waiter, key, dlock.WithRetryDelay(2*time.Second), dlock.WithRetryJitter(0))
		waitQueued(t, raw, key, 1)
		lat = append(lat, handOff(t, lock, done))
	}
	slices.Sort(lat)
	t.Logf("hand-off latencies with a 2s poll interval: %v", lat)
	if lat[len(lat)/2] > 50*time.Millisecond || lat[len(lat)-1] > 500*time.Millisecond {
		t.Fatalf("hand-off latencies %v: want a median under 50ms and none near the 2s poll interval", lat)
	}
	if n := raw.ZCard(testCtx(t), keys.Queue(key)).Val(); n != 0 {
		t.Fatalf("waiter queue left with %d entries after every waiter acquired", n)
	}
}

// A peer that releases with a plain DEL, or a lock that just expires,
// announces nothing: the waiter still gets the lock by polling.
func TestPollingFallback(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	waiter := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	closeLocker(t, waiter)
	poll := []dlock.Option{dlock.WithRetryDelay(100 * time.Millisecond), dlock.WithRetryJitter(20 * time.Millisecond)}

	t.Run("PlainDEL", func(t *testing.T) {
		key := lockcheck.Key(t)
		if _, err := holder.TryAcquire(testCtx(t), key, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		done := waitFor(testCtx(t), waiter, key, poll...)
		waitQueued(t, raw, key, 1)
		if err := raw.Del(testCtx(t), key).Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := <-done
		if got.err != nil {
			t.Fatalf("waiter after a plain DEL: %v", got.err)
		}
		defer got.lock.Release(context.Background())
		if d := got.at.Sub(start); d > 2*time.Second {
			t.Fatalf("waiter took %v after a plain DEL with a 100ms poll", d)
		}
	})
	t.Run("Expiry", func(t *testing.T) {
		key := lockcheck.Key(t)
		ttl := 300 * time.Millisecond
		if _, err := holder.TryAcquire(testCtx(t), key, ttl); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		done := waitFor(testCtx(t), waiter, key, poll...)
		got := <-done
		if got.err != nil {
			t.Fatalf("waiter after expiry: %v", got.err)
		}
		defer got.lock.Release(context.Background())
		if d := got.at.Sub(start); d < ttl-50*time.Millisecond || d > ttl+2*time.Second {
			t.Fatalf("waiter got a %v lock %v after it was taken; want about the TTL", ttl, d)
		}
	})
}

// An expiry announces nothing. The queue's head learned from its refused
// attempt when the key expires, and retries then by itself, long before its
// 5s poll: behind a holder that crashed (it never releases).
func TestHeadRetriesAtExpiry(t *testing.T) {
	raw := shared.Client(t)
	waiter := newLocker(t, shared.Client(t))
	closeLocker(t, waiter)
	key := lockcheck.Key(t)
	const ttl = 500 * time.Millisecond
	if err := raw.Set(testCtx(t), key, "crashed-holder", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(testCtx(t), 3*time.Second)
	defer cancel()
	got := <-waitFor(ctx, waiter, key, slowPoll...)
	if got.err != nil {
		t.Fatalf("waiter behind a key that expires after %v, polling every 5s: %v", ttl, got.err)
	}
	defer got.lock.Release(context.Background())
	if d := got.at.Sub(start); d < ttl-50*time.Millisecond || d > ttl+time.Second {
		t.Fatalf("waiter got the lock %v after the key was set for %v; want about that TTL", d, ttl)
	}
}

// The waiter's subscription is cut (CLIENT KILL TYPE pubsub) and refused on
// reconnect (an ACL without channels): the waiter still gets the lock by
// polling. Once subscribing is allowed again, its Locker resubscribes by
// itself and releases wake it again.
func TestDroppedSubscription(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	ctx := testCtx(t)
	holder := newLocker(t, srv.Client(t))
	waiter := newLocker(t, userClient(t, srv, "waiter"))
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := lockcheck.Key(t)

	lock, err := holder.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := waitFor(ctx, waiter, key, dlock.WithRetryDelay(300*time.Millisecond), dlock.WithRetryJitter(0))
	waitQueued(t, raw, key, 1)
	if err := raw.Do(ctx, "ACL", "SETUSER", "waiter", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil { // announced to a dead connection
		t.Fatal(err)
	}
	start := time.Now()
	got := <-done
	if got.err != nil {
		t.Fatalf("waiter with its subscription cut: %v", got.err)
	}
	if d := got.at.Sub(start); d > 3*time.Second {
		t.Fatalf("waiter took %v to poll with a 300ms interval", d)
	}
	if err := got.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Subscribing is allowed again: the Locker's receive loop retries, and a
	// waiter joins the queue only once the subscription is confirmed.
	if err := raw.Do(ctx, "ACL", "SETUSER", "waiter", "allchannels").Err(); err != nil {
		t.Fatal(err)
	}
	lock, err = holder.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done = waitFor(ctx, waiter, key, slowPoll...)
	waitQueued(t, raw, key, 1)
	start = time.Now()
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got = <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.lock.Release(context.Background())
	if d := got.at.Sub(start); d > time.Second {
		t.Fatalf("after resubscribing, the hand-off took %v with a 5s poll interval", d)
	}
}

// 16 Lockers, each with its own client, take turns on one key; a holder
// steps aside after its release until another one holds the lock, so every
// acquisition is a hand-off to a parked waiter. Never two holders at once,
// fences strictly increase, everyone gets its turns, and with a 3s poll
// interval the run is fast only because releases wake the next waiter.
func TestSixteenWaiters(t *testing.T) {
	const waiters, rounds = 16, 5
	key := lockcheck.Key(t)
	var holders, maxHolders, finished atomic.Int32
	var last atomic.Int64 // the latest holder, 1-based
	var mu sync.Mutex
	var lastFence uint64
	var fenceErr error
	counts := make([]int, waiters)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range waiters {
		l := newLocker(t, shared.Client(t))
		closeLocker(t, l)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			for range rounds {
				lock, err := dlock.Acquire(testCtx(t), l, key, 10*time.Second, dlock.WithRetryDelay(3*time.Second), dlock.WithRetryJitter(100*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				if h := holders.Add(1); h > maxHolders.Load() {
					maxHolders.Store(h)
				}
				last.Store(int64(i + 1))
				mu.Lock()
				if lock.Fence() <= lastFence && fenceErr == nil {
					fenceErr = errors.New("fence did not increase")
				}
				lastFence = lock.Fence()
				counts[i]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if err := lock.Release(testCtx(t)); err != nil {
					t.Error(err)
					return
				}
				for last.Load() == int64(i+1) && finished.Load() < waiters-1 {
					time.Sleep(50 * time.Microsecond) // step aside
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d hand-offs among %d waiters in %v", waiters*rounds, waiters, took)
	if m := maxHolders.Load(); m != 1 {
		t.Fatalf("%d holders at once", m)
	}
	if fenceErr != nil {
		t.Fatal(fenceErr)
	}
	for i, c := range counts {
		if c != rounds {
			t.Fatalf("waiter %d acquired %d times, want %d", i, c, rounds)
		}
	}
	// Polling alone (a poll every 3-3.1s per waiter) would need about 15s.
	if took > 5*time.Second {
		t.Fatalf("%d hand-offs took %v: releases did not wake the waiters", waiters*rounds, took)
	}
}

// Waiters that queued one after another get the lock in that order.
func TestArrivalOrder(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	key := lockcheck.Key(t)
	lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		l := newLocker(t, shared.Client(t))
		closeLocker(t, l)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock, err := dlock.Acquire(testCtx(t), l, key, 10*time.Second, slowPoll...)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			time.Sleep(5 * time.Millisecond)
			if err := lock.Release(testCtx(t)); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, raw, key, int64(i+1))
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("acquisition order %v, want arrival order [0 1 2 3]", got)
	}
}

// One Locker waiting on many keys at once uses one pub/sub connection, and
// Close (or closing the client) leaves no goroutine behind.
func TestOneSubscriptionPerLocker(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	ignore := goleak.IgnoreCurrent()
	c := srv.Client(t)
	holder, waiter := newLocker(t, srv.Client(t)), newLocker(t, c)
	closeLocker(t, holder)
	const nkeys = 8
	ctx, cancel := context.WithCancel(testCtx(t))
	var wg sync.WaitGroup
	var locks []*dlock.Lock
	for range nkeys {
		key := lockcheck.Key(t)
		lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lock)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := dlock.Acquire(ctx, waiter, key, time.Second, dlock.WithRetryDelay(5*time.Second))
				if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled wait: %v", err)
				}
			}()
		}
		waitQueued(t, raw, key, 1)
	}
	clients, err := raw.ClientList(testCtx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := countPubSub(clients); n != 1 {
		t.Fatalf("%d pub/sub connections for one Locker waiting on %d keys, want 1\n%s", n, nkeys, clients)
	}
	cancel()
	wg.Wait()
	// The waiters gave up: their queue entries are removed, so no release
	// is announced to nobody.
	for _, lock := range locks {
		q := keys.Queue(lock.Key())
		lockcheck.Eventually(t, 5*time.Second, func() error {
			if raw.ZCard(testCtx(t), q).Val() != 0 {
				return fmt.Errorf("queue %s not cleaned up after its waiters gave up", q)
			}
			return nil
		})
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	// A closed Locker still works; its waits poll.
	if _, err := dlock.Acquire(testCtx(t), waiter, locks[0].Key(), time.Second, dlock.WithRetryCount(1), dlock.WithRetryDelay(time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire on a closed Locker while held: %v", err)
	}

	// Without Close, closing the client ends the subscription goroutine.
	c2 := redis.NewClient(srv.Options())
	other := newLocker(t, c2)
	ctx2, cancel2 := context.WithCancel(testCtx(t))
	done := waitFor(ctx2, other, locks[0].Key(), dlock.WithRetryDelay(5*time.Second))
	waitQueued(t, raw, locks[0].Key(), 1)
	cancel2()
	<-done
	c2.Close()
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("after closing the client: %v", err)
	}
}

func countPubSub(clientList string) int {
	n := 0
	for _, line := range strings.Split(clientList, "\n") {
		if slices.Contains(strings.Fields(line), "flags=P") {
			n++
		}
	}
	return n
}

// Through a ClusterClient the release script's PUBLISH is broadcast over
// the cluster bus, so a waiter subscribed on any node is woken.
func TestWakeOnReleaseCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes a few seconds")
	}
	addrs := testsrv.StartRedisCluster(t, 3)
	newClient := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	raw := newClient()
	holder, waiter := newLocker(t, newClient()), newLocker(t, newClient())
	closeLocker(t, holder)
	closeLocker(t, waiter)
	for _, key := range []string{lockcheck.Key(t), "{tagged}" + lockcheck.Key(t), lockcheck.Key(t) + "-x"} {
		if d := queuedHandOff(t, raw, holder, waiter, key); d > time.Second {
			t.Fatalf("cluster hand-off of %q took %v with a 5s poll interval", key, d)
		}
	}

}

// The fence counter and the waiter queue sit where internal/keys says,
// for keys with and without a Cluster hash tag.
func TestDerivedKeys(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t), redislock.WithPrefix("p:"))
	w := newLocker(t, shared.Client(t), redislock.WithPrefix("p:"))
	closeLocker(t, w)
	for _, key := range []string{lockcheck.Key(t), "{tag}" + lockcheck.Key(t), "x{}" + lockcheck.Key(t), "{}{t}" + lockcheck.Key(t)} {
		full := "p:" + key
		lock, err := l.TryAcquire(testCtx(t), key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n := raw.Exists(testCtx(t), keys.Fence(full)).Val(); n != 1 {
			t.Fatalf("%q: no fence counter at %q", key, keys.Fence(full))
		}
		ctx, cancel := context.WithCancel(testCtx(t))
		done := waitFor(ctx, w, key, dlock.WithRetryDelay(5*time.Second))
		waitQueued(t, raw, full, 1)
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got := <-done
		cancel()
		if got.err != nil {
			t.Fatalf("%q: %v", key, got.err)
		}
		got.lock.Release(testCtx(t))
	}
}

// A release deletes the key and hands it to nobody: right after Release
// returns, any client on the wire can take the key with a plain SET NX,
// although a dlock waiter is queued (here behind a slow link, so its
// wake-up cannot beat the peer).
func TestKeyFreeBetweenHolders(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	wc, proxy := proxiedClient(t, shared, 0)
	waiter := newLocker(t, wc)
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := lockcheck.Key(t)
	lock, done := queueBehind(testCtx(t), t, raw, holder, waiter, key)
	proxy.Latency(t, 200*time.Millisecond, 0)
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ok, err := raw.SetNX(testCtx(t), key, "peer", 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("a peer's SET NX right after the release was refused: the key holds %q", raw.Get(testCtx(t), key).Val())
	}
	raw.Del(testCtx(t), key) // the peer releases; the waiter finds the key at its next attempt
	proxy.Heal()
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.lock.Release(testCtx(t))
}

// A waiter whose host is cut off (its connections blackholed, so the
// server still counts its subscription) heads the queue when the holder
// releases. Nothing on the server holds the lock for it: another waiter
// gets the lock within its retry delay plus jitter.
func TestBlackholedWaiterHoldsNothing(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	gc, proxy := proxiedClient(t, shared, 0)
	gone := newLocker(t, gc)
	next := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	closeLocker(t, next)
	key := lockcheck.Key(t)
	lock, err := holder.TryAcquire(testCtx(t), key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	goneCtx, cancelGone := context.WithCancel(testCtx(t))
	goneDone := waitFor(goneCtx, gone, key, slowPoll...)
	waitQueued(t, raw, key, 1)
	const delay, jitter = 100 * time.Millisecond, 50 * time.Millisecond
	nextDone := waitFor(testCtx(t), next, key, dlock.WithRetryDelay(delay), dlock.WithRetryJitter(jitter))
	waitQueued(t, raw, key, 2)
	proxy.Blackhole(t)
	start := time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := <-nextDone
	took := time.Since(start)
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.lock.Release(testCtx(t))
	cancelGone()
	<-goneDone
	proxy.Heal()
	gone.Close()
	t.Logf("the next waiter got the lock %v after the release that woke the cut-off head", took)
	if limit := delay + jitter + 400*time.Millisecond; took > limit {
		t.Fatalf("the next waiter got the lock %v after the release; want within the retry delay plus jitter (%v, with slack %v)", took, delay+jitter, limit)
	}
}

// Close races a Locker's overlapping waits and the release they wait for:
// afterwards nothing on the server waits for the closed Locker, and another
// waiter gets the lock within its retry delay plus jitter of the release.
func TestCloseRacingWaitsLeavesNothing(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	next := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	closeLocker(t, next)
	const delay, jitter = 100 * time.Millisecond, 50 * time.Millisecond
	for round := range 8 {
		closed := newLocker(t, shared.Client(t))
		key := lockcheck.Key(t)
		lock, err := holder.TryAcquire(testCtx(t), key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(testCtx(t))
		var waits []<-chan acquired
		for range 3 {
			waits = append(waits, waitFor(ctx, closed, key, slowPoll...))
		}
		waitQueued(t, raw, key, 1)
		nextDone := waitFor(testCtx(t), next, key, dlock.WithRetryDelay(delay), dlock.WithRetryJitter(jitter))
		waitQueued(t, raw, key, 2)
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { closed.Close() })
		wg.Go(cancel)
		wg.Go(func() {
			if err := lock.Release(testCtx(t)); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		for _, w := range waits {
			if got := <-w; got.err == nil {
				got.lock.Release(testCtx(t))
			}
		}
		got := <-nextDone
		took := time.Since(start)
		if got.err != nil {
			t.Fatal(got.err)
		}
		got.lock.Release(testCtx(t))
		if limit := delay + jitter + 400*time.Millisecond; took > limit {
			t.Fatalf("round %d: the next waiter got the lock %v after the release; want within %v (retry delay plus jitter, with slack)", round, took, limit)
		}
	}
}

// dropQueuedReply is a client hook that loses the reply of the first
// acquire attempt that queues the Locker (the script with a queue key): the
// server ran it, the Locker gets a timeout.
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

// A waiting attempt queues the Locker but its reply is lost, so the Locker
// never learns its place, and its wait ends (its context) before another
// attempt tells it. Leaving still takes it out of the queue: the next
// release wakes the next waiter at once, not the one that left.
func TestLostQueuedReplyLeavesNoEntry(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	wc := shared.Client(t)
	drop := &dropQueuedReply{fired: make(chan struct{})}
	wc.AddHook(drop)
	gone := newLocker(t, wc)
	next := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	closeLocker(t, gone)
	closeLocker(t, next)
	key := lockcheck.Key(t)
	lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	goneDone := waitFor(ctx, gone, key, slowPoll...)
	select {
	case <-drop.fired:
	case <-testCtx(t).Done():
		t.Fatal("the waiter never sent a queueing attempt")
	}
	waitQueued(t, raw, key, 1) // the attempt whose reply was lost queued it
	cancel()
	if got := <-goneDone; got.err == nil {
		t.Fatal("a cancelled wait behind a held lock acquired it")
	}
	q := keys.Queue(key)
	lockcheck.Eventually(t, 3*time.Second, func() error {
		if ids := raw.ZRange(testCtx(t), q, 0, -1).Val(); len(ids) != 0 {
			return fmt.Errorf("queue %s still holds %v after the only waiter left", q, ids)
		}
		return nil
	})
	nextDone := waitFor(testCtx(t), next, key, slowPoll...)
	waitQueued(t, raw, key, 1)
	start := time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := <-nextDone
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.lock.Release(testCtx(t))
	if d := got.at.Sub(start); d > time.Second {
		t.Fatalf("the next waiter got the lock %v after the release, with a 5s poll interval", d)
	}
}

// connProxies is a dialer that puts each connection of a client through a
// proxy of its own, so that a test can silence one connection (here the
// subscription's) and leave the others, and new ones, working.
type connProxies struct {
	target string
	mu     sync.Mutex
	all    []*tcpproxy.Proxy
	subs   []*tcpproxy.Proxy // of connections that sent SUBSCRIBE
}

func (d *connProxies) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	p, err := tcpproxy.New("tcp", d.target, nil)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.all = append(d.all, p)
	d.mu.Unlock()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &proxiedConn{Conn: c, p: p, d: d}, nil
}

// proxiedLocker returns a Locker (closed at the test's end) whose client
// puts each connection through a proxy of d's.
func proxiedLocker(t *testing.T) (*connProxies, *redislock.Locker) {
	d := &connProxies{target: shared.Addr}
	t.Cleanup(d.close)
	opts := shared.Options()
	opts.Dialer = d.dial
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	l := newLocker(t, c)
	closeLocker(t, l)
	return d, l
}

// blackholeSubs silences the subscription connections dialled so far.
func (d *connProxies) blackholeSubs(t *testing.T) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.subs) == 0 {
		t.Fatal("no subscription connection to silence")
	}
	for _, p := range d.subs {
		p.Blackhole(true)
	}
}

func (d *connProxies) close() {
	d.mu.Lock()
	all := d.all
	d.mu.Unlock()
	for _, p := range all {
		p.Close()
	}
}

type proxiedConn struct {
	net.Conn
	p    *tcpproxy.Proxy
	d    *connProxies
	once sync.Once
}

func (c *proxiedConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("subscribe")) {
		c.once.Do(func() {
			c.d.mu.Lock()
			c.d.subs = append(c.d.subs, c.p)
			c.d.mu.Unlock()
		})
	}
	return c.Conn.Write(b)
}

func (c *proxiedConn) Close() error {
	err := c.Conn.Close()
	c.p.Close()
	return err
}

// The waiter's subscription connection goes silent (a NAT that dropped the
// flow: no RST, the server still counts the subscriber) and the release is
// published into it. The Locker finds the connection dead by a ping that
// gets no pong, subscribes again on a new one, and the waiter (polling
// every 10s) gets the lock within a few seconds of the release.
func TestHalfOpenSubscription(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	d, waiter := proxiedLocker(t)
	key := lockcheck.Key(t)
	lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const poll = 10 * time.Second
	done := waitFor(testCtx(t), waiter, key, dlock.WithRetryDelay(poll), dlock.WithRetryJitter(0))
	waitQueued(t, raw, key, 1)
	d.blackholeSubs(t)
	start := time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := <-done
	took := got.at.Sub(start)
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.lock.Release(testCtx(t))
	t.Logf("the waiter got the lock %v after the release announced into its silent subscription", took)
	// Detection takes up to two seconds of silence (ping, pong) after the last
	// traffic, then a reconnect; 4s leaves room for a loaded machine and
	// is far below the 10s poll.
	if took > 4*time.Second {
		t.Fatalf("the waiter got the lock %v after the release (poll %v): its silent subscription went unnoticed", took, poll)
	}
}

// Close comes while the Locker's subscription is silent and its ping
// awaits a pong that will not come (the moment it is about to redial):
// Close returns at once, and no goroutine of the subscription is left.
func TestCloseDuringSilentSubscription(t *testing.T) {
	raw := shared.Client(t)
	holder := newLocker(t, shared.Client(t))
	closeLocker(t, holder)
	d, waiter := proxiedLocker(t) // closed again at the end: a second Close
	key := lockcheck.Key(t)
	lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(testCtx(t))
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := waitFor(ctx, waiter, key, dlock.WithRetryDelay(10*time.Second), dlock.WithRetryJitter(0))
	waitQueued(t, raw, key, 1)
	d.blackholeSubs(t)
	// A ping goes out after a second of silence; its pong never comes.
	// (Under load this lands at another point of the loop, which Close
	// must handle as well.)
	time.Sleep(1300 * time.Millisecond)
	start := time.Now()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	// Close sends nothing to the silent connection: it closes it. (It
	// waits for the ZREM of its queue entry, on a working connection.)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("Close took %v with a silent subscription", took)
	}
	cancel()
	<-done
	d.close() // the proxies' own goroutines
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("after Close: %v", err)
	}
}
