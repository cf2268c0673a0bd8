package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// proxied returns a Locker whose connections to the nodes in slow go
// through a TCP proxy in front of the server, plus those proxies.
func proxied(t *testing.T, rs []*testsrv.Redis, slow []int, opts ...redlock.Option) (*redlock.Locker, map[int]*testproxy.Proxy) {
	t.Helper()
	ps := map[int]*testproxy.Proxy{}
	cs := make([]redis.UniversalClient, len(rs))
	for i, r := range rs {
		addr := r.Addr
		for _, s := range slow {
			if s == i {
				ps[i] = testproxy.Start(t, r.Addr)
				addr = ps[i].Addr
			}
		}
		cs[i] = client(t, addr)
	}
	opts = append([]redlock.Option{redlock.WithLogger(quietLogger())}, opts...)
	l, err := redlock.New(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, ps
}

// waitNoKeys waits until no node has key (late writes land after the
// replies were given up on), or fails.
func waitNoKeys(t *testing.T, rs []*testsrv.Redis, key string, within time.Duration) {
	t.Helper()
	lockcheck.Eventually(t, within, func() error {
		if ks := keysOn(t, rs, key); len(ks) != 0 {
			return fmt.Errorf("keys left on the nodes: %v", ks)
		}
		return nil
	})
}

// F7: one node slower than the node timeout counts as failed; the lock is
// taken on the others as soon as they granted, without waiting for the slow
// node. The key the slow node set is gone within its TTL: the release cannot
// reach it in time (a new connection's handshake is as slow as the node), so
// it expires.
func TestSlowNodeBeyondTimeout(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l, ps := proxied(t, rs, []int{4}, redlock.WithNodeTimeout(200*time.Millisecond))
	warm(t, l)
	ps[4].Latency(t, 600*time.Millisecond, 0)
	key := lockcheck.Key(t)
	const ttl = time.Second
	lock := mustAcquire(t, l, key, ttl)
	// The majority answered at once: the round did not wait out the slow
	// node's 200ms timeout, and the validity shows it.
	if left, limit := lock.Remaining(), ttl-200*time.Millisecond-bridge.Drift(ttl, bridge.DefaultDriftFactor); left <= limit {
		t.Fatalf("validity left %v, not more than ttl - node timeout - drift = %v: the acquisition waited for the slow node", left, limit)
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("release: %v", err)
	}
	// Release returns once a majority deleted; the fourth fast node
	// follows within a round trip.
	waitNoKeys(t, rs[:4], key, 500*time.Millisecond)
	waitNoKeys(t, rs, key, ttl+time.Second)
}

// An acquisition's elapsed time counts against its validity: three of five
// nodes answer after 250ms (within the node timeout) and the lock is
// granted with what is left of a 400ms TTL; slower than the TTL allows, the
// attempt is refused and undone everywhere.
func TestAcquisitionExceedingTTLRefused(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l, ps := proxied(t, rs, []int{0, 1, 2}, redlock.WithNodeTimeout(390*time.Millisecond))
	warm(t, l)
	key := lockcheck.Key(t)
	for range 2 { // a fence history for the key, on every node
		lock := mustAcquire(t, l, key, 5*time.Second)
		lock.Release(testCtx(t))
	}
	const ttl = 400 * time.Millisecond
	slow := func() {
		for _, p := range ps {
			p.Latency(t, 250*time.Millisecond, 0)
		}
	}

	// The control first, on connections no slow round has touched yet (a
	// connection redialled through the slow proxy costs three slow round
	// trips): the same slow nodes with agreeing counters need one round,
	// and the lock is granted with what is left of the TTL.
	slow()
	lock, err := l.TryAcquire(testCtx(t), key, ttl)
	if err != nil {
		t.Fatalf("one slow round of a 400ms TTL: %v", err)
	}
	if left, limit := lock.Remaining(), ttl-250*time.Millisecond-bridge.Drift(ttl, bridge.DefaultDriftFactor); left <= 0 || left > limit {
		t.Fatalf("validity left %v, want positive and at most ttl - 250ms - drift = %v", left, limit)
	}
	lock.Release(testCtx(t))
	waitNoKeys(t, rs, key, 2*time.Second)

	// Slower than the TTL allows: no reply can come with validity left, so
	// the node timeout shrinks to the TTL's validity, the slow nodes count
	// as failed, and the attempt is refused and undone on the fast nodes.
	for _, p := range ps {
		p.Heal()
		p.Latency(t, 450*time.Millisecond, 0)
	}
	start := time.Now()
	_, err = l.TryAcquire(testCtx(t), key, ttl)
	took := time.Since(start)
	if err == nil || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("acquisition with nodes slower than the %v TTL: got %v after %v, want ErrUnavailable", ttl, err, took)
	}
	if ks := keysOn(t, rs[3:], key); len(ks) != 0 { // released at once, not expired
		t.Fatalf("refused acquisition left keys on the fast nodes: %v", ks)
	}
	for _, p := range ps {
		p.Heal()
	}
	waitNoKeys(t, rs, key, 2*time.Second)
}

// Two slow nodes (within the node timeout) hold up neither the acquisition
// nor the release: both return on the three fast nodes' answers. The slow
// nodes' requests still run, in order: the release reaches each slow node
// after its late grant, so no key is left there until the 10s TTL (Close
// waits for those deletions), and another Locker takes the lock on all five
// nodes right after.
func TestSlowMinorityDoesNotDelay(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l, ps := proxied(t, rs, []int{3, 4}, redlock.WithNodeTimeout(2*time.Second))
	warm(t, l)
	warm(t, l) // the first round heard every node; this one may not wait
	for _, i := range []int{3, 4} {
		ps[i].Latency(t, 300*time.Millisecond, 0)
	}
	key := lockcheck.Key(t)
	start := time.Now()
	lock := mustAcquire(t, l, key, 10*time.Second)
	acquired := time.Since(start)
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("release: %v", err)
	}
	took := time.Since(start)
	if took >= 300*time.Millisecond {
		t.Fatalf("acquire (%v) and release took %v: they waited for the slow nodes (300ms each way)", acquired, took)
	}
	// Close waits for the deletions still under way on the slow nodes.
	l.Close()
	if ks := keysOn(t, rs, key); len(ks) != 0 {
		t.Fatalf("keys left after Close: %v", ks)
	}
	other := newLocker(t, rs)
	lock = mustAcquire(t, other, key, 10*time.Second)
	if ks := keysOn(t, rs, key); len(ks) != 5 {
		t.Fatalf("the next holder holds %d nodes, want all 5: %v", len(ks), ks)
	}
	lock.Release(testCtx(t))
}

// An Extend called while two slow nodes have not yet answered the
// acquisition still ends with its caller's context: it does not wait out
// the slow nodes (each Extend call on a node waits for that node's answer
// to the acquisition, but not past the caller's deadline).
func TestExtendBehindSlowAcquisitionKeepsCallersDeadline(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l, ps := proxied(t, rs, []int{3, 4}, redlock.WithNodeTimeout(5*time.Second))
	warm(t, l)
	warm(t, l)
	for _, i := range []int{3, 4} {
		ps[i].Latency(t, 1500*time.Millisecond, 0)
	}
	lock := mustAcquire(t, l, lockcheck.Key(t), 20*time.Second)
	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(testCtx(t), deadline)
	defer cancel()
	start := time.Now()
	err := lock.Extend(ctx, 20*time.Second)
	if took := time.Since(start); took > deadline+time.Second {
		t.Fatalf("Extend with a %v deadline returned after %v (%v): it waited for the slow nodes' acquisition", deadline, took, err)
	}
	for _, p := range ps {
		p.Heal()
	}
	lock.Release(testCtx(t))
}

// F6 in a loop: one node paused (SIGSTOP) for longer than the node timeout
// while a Locker takes and releases a key back to back. The other nodes
// keep granting, and no key is left behind on them: a request to a node
// waits for the Locker's earlier request to that node only, not for the
// paused one, and then gets a whole node timeout of its own. (A request
// whose reply the paused node sends too late may still land there after
// the release meant to undo it; that key expires with its TTL, F16.)
func TestPausedNodeLeavesNoKeysOnOthers(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	const timeout = 250 * time.Millisecond
	l := newLocker(t, rs, redlock.WithNodeTimeout(timeout))
	warm(t, l)
	key := lockcheck.Key(t)
	var paused atomic.Bool
	var grants, grantsPaused atomic.Int64
	first, stop, stopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			lock, err := l.TryAcquire(testCtx(t), key, 10*time.Second)
			if err != nil {
				continue
			}
			if grants.Add(1) == 1 {
				close(first) // the loop runs: pause a node under it
			}
			if paused.Load() {
				grantsPaused.Add(1)
			}
			lock.Release(testCtx(t))
		}
	}()
	<-first
	rs[0].Pause()
	t.Cleanup(rs[0].Resume)
	paused.Store(true)
	time.Sleep(3 * timeout)
	paused.Store(false)
	rs[0].Resume()
	time.Sleep(2 * timeout)
	close(stop)
	<-stopped
	l.Close() // waits for the requests still under way
	if grantsPaused.Load() == 0 {
		t.Fatalf("no grant while node 0 was paused (%d in all): the loop waited for it", grants.Load())
	}
	if ks := keysOn(t, rs[1:], key); len(ks) != 0 {
		t.Fatalf("keys left on nodes that were never paused, after %d grants (%d while node 0 was paused): %v", grants.Load(), grantsPaused.Load(), ks)
	}
	t.Logf("%d grants, %d while node 0 was paused; left on node 0: %v", grants.Load(), grantsPaused.Load(), keysOn(t, rs[:1], key))
}
