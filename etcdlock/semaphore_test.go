package etcdlock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

func TestSemaphore(t *testing.T) {
	c := etcdtest.Start(t, 1)
	t.Run("KeysAndFences", func(t *testing.T) { semKeysAndFences(t, c) })
	t.Run("KilledHolder", func(t *testing.T) { semKilledHolder(t, c) })
	t.Run("LimitRace", func(t *testing.T) { semLimitRace(t, c) })
}

// A permit is a key of the slot's queue, prefix+{name}#slot/lease, whose
// create revision is the fence and whose value records the limit (with the
// holder record); SetLimit rewrites the value and keeps the lease and the
// revision.
func semKeysAndFences(t *testing.T, c *etcdtest.Cluster) {
	cli := c.Client(t)
	l := newLocker(t, c.Client(t))
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	lock, err := dlock.Semaphore(l, 3).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	resp, err := cli.Get(ctx, bridge.SlotKey(name, 0)+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%d keys in slot 0's queue, want 1", len(resp.Kvs))
	}
	kv := resp.Kvs[0]
	if uint64(kv.CreateRevision) != lock.Fence() || string(kv.Value) != `{"limit":3}` {
		t.Fatalf("slot key: revision %d, value %q; permit's fence %d", kv.CreateRevision, kv.Value, lock.Fence())
	}
	infos, err := l.Inspect(ctx, "{"+name+"}#*", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != lock.Key() || infos[0].Limit != 3 || infos[0].Fence != lock.Fence() {
		t.Fatalf("Inspect: %+v; want the permit on %q with limit 3", infos, lock.Key())
	}
	if err := dlock.SetLimit(ctx, l, name, 5); err != nil {
		t.Fatal(err)
	}
	resp, err = cli.Get(ctx, string(kv.Key))
	if err != nil {
		t.Fatal(err)
	}
	after := resp.Kvs[0]
	if after.CreateRevision != kv.CreateRevision || after.Lease != kv.Lease || string(after.Value) != `{"limit":5}` {
		t.Fatalf("after SetLimit: revision %d, lease %x, value %q; before %d, %x",
			after.CreateRevision, after.Lease, after.Value, kv.CreateRevision, kv.Lease)
	}
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend after SetLimit: %v", err)
	}
}

// A holder that dies (its client closed: no renewal, no release) leaves
// its permit to the lease's expiry, which wakes a waiter watching the
// slots.
func semKilledHolder(t *testing.T, c *etcdtest.Cluster) {
	dead := c.Client(t)
	l := newLocker(t, c.Client(t))
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	if _, err := dlock.Semaphore(newLocker(t, dead), 1).TryAcquire(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	dead.Close()
	killed := time.Now()
	lock, err := dlock.Acquire(ctx, dlock.Semaphore(l, 1), name, 10*time.Second,
		dlock.WithRetryDelay(time.Minute), dlock.WithRetryJitter(0))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	// The lease's TTL is 1s, but etcd's minimum may stretch it; the
	// wait's poll is a minute away.
	if d := time.Since(killed); d > 10*time.Second {
		t.Fatalf("the dead holder's permit came back after %v", d)
	}
	t.Logf("the dead holder's permit came back after %v", time.Since(killed))
}

// Lockers with different limits racing on an idle semaphore: one limit
// wins, and the grants never exceed it.
func semLimitRace(t *testing.T, c *etcdtest.Cluster) {
	ctx := testCtx(t)
	var lockers [2][]dlock.Locker
	for range 4 {
		lockers[0] = append(lockers[0], dlock.Semaphore(newLocker(t, c.Client(t)), 2))
		lockers[1] = append(lockers[1], dlock.Semaphore(newLocker(t, c.Client(t)), 3))
	}
	for round := range 5 {
		name := fmt.Sprintf("%s:%d", lockcheck.Key(t), round)
		var mu sync.Mutex
		var held []*dlock.Lock
		granted := [2]int{}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for side := range lockers {
			for _, l := range lockers[side] {
				wg.Go(func() {
					<-start
					lock, err := l.TryAcquire(ctx, name, 10*time.Second)
					if err != nil {
						if s, _ := lockcheck.Classify(err); s != dlock.ErrNotAcquired && s != dlock.ErrInvalid {
							t.Errorf("TryAcquire: %v", err)
						}
						return
					}
					mu.Lock()
					held = append(held, lock)
					granted[side]++
					mu.Unlock()
				})
			}
		}
		close(start)
		wg.Wait()
		for _, lock := range held {
			lock.Release(ctx)
		}
		if granted[0] > 0 && granted[1] > 0 || granted[0] > 2 || granted[1] > 3 {
			t.Fatalf("round %d: %d grants with limit 2 and %d with limit 3", round, granted[0], granted[1])
		}
	}
}
