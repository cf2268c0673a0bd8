package redislock_test

import (
	"context"
	"testing"
	"time"
)

// maxCycleAllocs bounds the heap allocations of one uncontended cycle
// (TryAcquire, then Release) with default options: bench/RESULTS.md lists
// where each one goes.
const maxCycleAllocs = 33

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
