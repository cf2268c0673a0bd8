package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// A new deployment with one node down grants locks from the first attempt:
// a majority answers, and fences need no history on any node.
func TestFreshDeploymentWithNodeDown(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	rs[2].Kill()
	l := newLocker(t, rs)
	f := lockcheck.FenceHistory(t, l, lockcheck.Key(t), 20, nil)
	err := dlock.Do(testCtx(t), l, lockcheck.Key(t), time.Second, func(ctx context.Context) error { return nil })
	if err != nil {
		t.Fatalf("Do with one node of three down: %v", err)
	}
	t.Logf("fences %d .. %d with node 3 down", f[0], f[len(f)-1])
}

// Fences stay monotonic across 1,000 successive holders on five nodes
// without persistence while nodes restart empty one at a time (at once and
// after the TTL), a majority restarts at once, every node restarts at once,
// a node comes back from an old snapshot, and a node is replaced by its
// replica, promoted while it lagged. Exclusion is the delayed-restart rule's
// business; the fences hold through all of it.
func TestFencesThroughRestarts(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	// Node 4 is reached through a dialer whose target a test can move,
	// to put a promoted replica in its place.
	var target atomic.Value
	target.Store(rs[4].Addr)
	cs := clients(t, rs[:4])
	cs = append(cs, client(t, rs[4].Addr, func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		}
	}))
	l, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	restart := func(is ...int) func() {
		return func() {
			for _, i := range is {
				rs[i].Kill()
			}
			for _, i := range is {
				if err := rs[i].Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var replica *testsrv.Redis
	faults := map[int]func(){
		100: restart(0),
		150: restart(1),
		200: func() { rs[2].Kill(); time.Sleep(2500 * time.Millisecond); restart(2)() }, // after the TTL
		300: restart(0, 1, 2),                                                           // a majority at once
		400: restart(0, 1, 2, 3, 4),                                                     // every node
		500: func() { // node 3's snapshot, restored at 700
			if err := client(t, rs[3].Addr).Save(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		},
		700: restart(3),
		750: func() { // node 4 gets a replica
			replica = testsrv.StartRedis(t, testsrv.RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(rs[4].Port)))
			waitSynced(t, replica)
		},
		850: func() { replica.Pause() }, // the replica misses holders 850-899
		900: func() { // node 4 dies; its replica, promoted, takes its place
			rs[4].Kill()
			replica.Resume()
			if err := client(t, replica.Addr).Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
			target.Store(replica.Addr)
		},
	}
	f := lockcheck.FenceHistory(t, l, lockcheck.Key(t), 1000, faults)
	t.Logf("fences %d .. %d", f[0], f[len(f)-1])
}

func waitSynced(t *testing.T, r *testsrv.Redis) {
	t.Helper()
	c := client(t, r.Addr)
	lockcheck.Eventually(t, 10*time.Second, func() error {
		if info := c.Info(context.Background(), "replication").Val(); !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not in sync: %s", info)
		}
		return nil
	})
}

// The clock rule's assumption, shown failing: every node restarts empty with
// its clock 10s behind, so the next holder's fence is below the last one.
// The guard at the resource rejects the stale holder's writes.
func TestFenceInversionWhenClocksStepBack(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	a := newLocker(t, rs)
	key := lockcheck.Key(t)
	guard := fence.NewMemory()
	la := mustAcquire(t, a, key, time.Minute)
	if err := guard.Write("ledger", la.Fence(), la.Token(), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	b := newLocker(t, rs)
	for i := range rs {
		b.SetClockOffset(i, -10_000_000)
	}
	lb := mustAcquire(t, b, key, time.Minute)
	if lb.Fence() >= la.Fence() {
		t.Fatalf("B's fence %d is not below A's %d: the stepped-back clocks did not show", lb.Fence(), la.Fence())
	}
	t.Logf("inversion: A's fence %d, B's fence %d after every node restarted with its clock 10s behind", la.Fence(), lb.Fence())
	err := guard.Write("ledger", lb.Fence(), lb.Token(), func() error { t.Error("B's stale write ran"); return nil })
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("guard: B's write with fence %d after A's %d: %v, want fence.ErrStale", lb.Fence(), la.Fence(), err)
	}
}

// A release reports what the nodes' answers mean. With two of five nodes
// restarted empty during the hold, the other three still delete the key:
// released. With three of five restarted, every node answers and a majority
// no longer holds the key: not held, not unavailable.
func TestReleaseAfterRestarts(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l := newLocker(t, rs)
	err := dlock.Do(testCtx(t), l, lockcheck.Key(t), 5*time.Second, func(ctx context.Context) error {
		for _, r := range rs[:2] {
			if err := r.Restart(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do with two of five nodes restarted during the section: %v", err)
	}
	lock := mustAcquire(t, l, lockcheck.Key(t), 5*time.Second)
	for _, r := range rs[:3] {
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	err = lock.Release(testCtx(t))
	if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("release with three of five nodes restarted empty: %v, want ErrNotHeld", err)
	}
}

// After locks on many distinct names are taken and released, no node keeps
// anything of dlock's once the fence TTL has passed.
func TestNoResidue(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	const ttl = 500 * time.Millisecond
	l := newLocker(t, rs, redlock.WithFenceTTL(ttl))
	for range 500 {
		lock := mustAcquire(t, l, lockcheck.Key(t), time.Minute)
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close() // the slower nodes' deletions
	cs := make([]*redis.Client, len(rs))
	for i, r := range rs {
		cs[i] = client(t, r.Addr)
	}
	lockcheck.Eventually(t, ttl+5*time.Second, func() error {
		for i, c := range cs {
			if n := c.DBSize(testCtx(t)).Val(); n != 0 {
				return fmt.Errorf("node %s keeps %d keys after the fence TTL of %v", rs[i].Addr, n, ttl)
			}
		}
		return nil
	})
}
