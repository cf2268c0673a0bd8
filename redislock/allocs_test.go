package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// maxCycleAllocs bounds the heap allocations of one uncontended cycle
// (TryAcquire, then Release) with default options: bench/RESULTS.md lists
// where each one goes.
const maxCycleAllocs = 31

// TestCycleAllocations fails when the uncontended cycle allocates more
// than it did when the bound was set: a regression of the hot path.
func TestCycleAllocations(t *testing.T) {
	l := newLocker(t, shared.Client(t))
	defer l.Close()
	ctx := context.Background()
	cycle := func() {
		lock, err := l.TryAcquire(ctx, "allocs", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 { // the connection, the scripts, the probe
		cycle()
	}
	if n := testing.AllocsPerRun(500, cycle); n > maxCycleAllocs+raceAllocs {
		t.Errorf("one TryAcquire+Release cycle allocates %.1f objects, want at most %d", n, maxCycleAllocs+raceAllocs)
	} else {
		t.Logf("%.1f allocations per cycle", n)
	}
}

// Each attempt sets its own TTL on the server, though the Locker reuses
// the argument of the TTL before it when they are the same.
func TestEachAttemptSetsItsTTL(t *testing.T) {
	c := shared.Client(t)
	l := newLocker(t, c)
	defer l.Close()
	ctx := testCtx(t)
	for i, ttl := range []time.Duration{time.Minute, time.Minute, 20 * time.Second, time.Minute} {
		key := fmt.Sprintf("ttl-%d", i)
		lock, err := l.TryAcquire(ctx, key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		left, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if left > ttl || left < ttl-5*time.Second {
			t.Errorf("attempt %d for %v: the key's TTL is %v", i, ttl, left)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
