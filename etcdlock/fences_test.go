package etcdlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// TestFencesAcrossLeaderKills: fences keep increasing while the leader is
// killed and restarted between holders, and a fence guard accepts them.
func TestFencesAcrossLeaderKills(t *testing.T) {
	c := etcdtest.Start(t, 3)
	l := newLocker(t, c.Client(t))
	kill := func() {
		m := c.Leader(t)
		m.Kill()
		m.Restart(t)
	}
	fences := lockcheck.FenceHistory(t, l, "fences", 8, map[int]func(){3: kill, 6: kill})
	g := fence.NewMemory()
	for i, f := range fences {
		if err := g.Write("res", f, fmt.Sprint("holder", i), func() error { return nil }); err != nil {
			t.Fatalf("guard refused fence %d of %v: %v", f, fences, err)
		}
	}
}

// TestFIFO: dlock.Acquire with a Locker waits in the lock's queue as
// concurrency.Mutex does: each waiter's key is in the queue while it waits,
// the waiters (of four Lockers) get the lock in the order they queued, and
// each is woken by the deletion of the key ahead, not by polling (the retry
// delay is a minute).
func TestFIFO(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	first, err := newLocker(t, c.Client(t)).TryAcquire(ctx, "queued", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 4 {
		l := newLocker(t, c.Client(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock, err := dlock.Acquire(ctx, l, "queued", 5*time.Second, dlock.WithRetryDelay(time.Minute))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			lock.Release(context.Background())
		}()
		lockcheck.Eventually(t, 5*time.Second, func() error {
			return queueLen(ctx, admin, "queued", i+2)
		})
	}
	start := time.Now()
	first.Release(ctx)
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("waiters served in order %v, want 0 1 2 3", order)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("four hand-offs took %v", d)
	}
}
