package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/redlock"
)

// The calls to one node share its round trips (internal/batch). These
// tests slow the nodes' replies with proxies to see what that does.

// slowNodes returns a Locker over the shared servers, each behind a proxy,
// with its clients and proxies. The Locker has met every node and each
// client has made its first pipeline (through a slow proxy, a client's
// first took three times the latency) before any latency is set.
func slowNodes(t *testing.T) (*redlock.Locker, []*redis.Client, []*testproxy.Proxy) {
	t.Helper()
	var cs []*redis.Client
	var ucs []redis.UniversalClient
	var ps []*testproxy.Proxy
	for _, r := range shared {
		p := testproxy.Start(t, r.Addr)
		c := client(t, p.Addr, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
		if _, err := c.Pipelined(testCtx(t), func(p redis.Pipeliner) error { return p.Ping(testCtx(t)).Err() }); err != nil {
			t.Fatal(err)
		}
		ps, cs, ucs = append(ps, p), append(cs, c), append(ucs, c)
	}
	l, err := redlock.New(ucs, redlock.WithNodeTimeout(5*time.Second), redlock.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, l)
	return l, cs, ps
}

// waitFor waits until cond holds; what says what it waits for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	lockcheck.Eventually(t, 10*time.Second, func() error {
		if !cond() {
			return errors.New("still waiting for " + what)
		}
		return nil
	})
}

// Concurrent attempts share each node's round trips: 16 of them on their
// own keys use one connection per node, where one each would open 16.
func TestConcurrentAttemptsShareNodeConnections(t *testing.T) {
	l, cs, ps := slowNodes(t)
	for _, p := range ps {
		p.Latency(t, 100*time.Millisecond, 0)
	}
	base := lockcheck.Key(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { mustAcquire(t, l, fmt.Sprint(base, i), 30*time.Second) })
	}
	wg.Wait()
	for i, c := range cs {
		if n := c.PoolStats().TotalConns; n > 2 {
			t.Errorf("node %d: 16 concurrent attempts opened %d connections, want 1 (2 at most)", i, n)
		}
	}
}

// An attempt's call to a node that gives up while its round trip is in
// flight (here: the caller cancels once it holds the lock on the other
// four) has its key there released when the node's reply comes, not left
// for the TTL.
func TestCallGivingUpOnANodeGivesItsKeyBack(t *testing.T) {
	keyB := lockcheck.Key(t) + "b"
	exists, keyC := giveUpOnSlowNode(t, keyB, func(ctx context.Context, l *redlock.Locker) (*dlock.Lock, error) {
		return l.TryAcquire(ctx, keyB, 30*time.Second)
	})
	waitFor(t, "B's key on node 4 to be released", func() bool { return !exists(keyB) })
	if !exists(keyC) {
		t.Fatal("C's key on node 4 is gone: only B's call gave up")
	}
}

// A permit's call to a node that gives up while the semaphore script is in
// flight there has the slot it took on that node given back when the reply
// comes, as a lock's key is: with a 30s TTL, the slot is gone from the
// node within seconds, and stays held on the nodes that granted the
// permit.
func TestPermitCallGivingUpOnANodeGivesItsSlotBack(t *testing.T) {
	name := lockcheck.Key(t)
	slot := bridge.SlotKey(name, 0)
	exists, keyC := giveUpOnSlowNode(t, slot, func(ctx context.Context, l *redlock.Locker) (*dlock.Lock, error) {
		return dlock.Semaphore(l, 2).TryAcquire(ctx, name, 30*time.Second)
	})
	start := time.Now()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if exists(slot) {
			return errors.New("the permit's slot on node 4 is still held after its call gave up (TTL 30s)")
		}
		return nil
	})
	t.Logf("slot given back on node 4 %v after the call gave up", time.Since(start).Round(time.Millisecond))
	if !exists(keyC) {
		t.Fatal("C's key on node 4 is gone: only the permit's call gave up")
	}
	if n := len(keysOn(t, shared[:4], slot)); n != 4 {
		t.Fatalf("the permit's slot is held on %d of the 4 nodes that granted it, want 4", n)
	}
}

// giveUpOnSlowNode has take acquire key (B) with a Locker over the shared
// servers whose node 4 answers a second late: the other four grant it at
// once, and its call to node 4 waits for the node's next batch behind a
// call in flight (A). A later call with a later deadline (C, on a key of
// its own) sends that batch; once B's call ran on node 4, B's context is
// cancelled, so that its call gives up with the batch in flight. It
// returns whether a key exists on node 4, and C's key.
func giveUpOnSlowNode(t *testing.T, key string, take func(context.Context, *redlock.Locker) (*dlock.Lock, error)) (exists func(string) bool, keyC string) {
	t.Helper()
	// The scripts are loaded on every server: a call that gave up never
	// sees its NOSCRIPT reply.
	warmer := newLocker(t, shared)
	defer warmer.Close()
	if err := mustAcquire(t, dlock.Semaphore(warmer, 1), lockcheck.Key(t)+"warm", time.Second).Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	l, _, ps := slowNodes(t)
	ps[4].Latency(t, time.Second, 0)
	node4 := shared[4].Client(t)
	exists = func(key string) bool {
		n, err := node4.Exists(testCtx(t), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	keyA, keyC := lockcheck.Key(t)+"a", lockcheck.Key(t)+"c"

	mustAcquire(t, l, keyA, 30*time.Second) // the majority answered; node 4's reply is on its way
	waitFor(t, "A's call on node 4 to run", func() bool { return exists(keyA) })
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	lockB, err := take(ctxB, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lockB.Release(context.Background()) })
	waitFor(t, "B's call to wait on node 4", func() bool { return l.BatchWaiting(4) == 1 })
	mustAcquire(t, l, keyC, 30*time.Second) // a later deadline than B's: it sends node 4's next batch
	waitFor(t, "C's call to wait on node 4", func() bool { return l.BatchWaiting(4) == 2 })
	waitFor(t, "B's call on node 4 to run", func() bool { return exists(key) })
	cancelB()
	return exists, keyC
}
