package redlock_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// The inversion of DESIGN.md and FAULTS.md F20, built step by step: nodes
// A-E; a holder that reaches only {A,B,C} gets fence f, written to those
// three. A and B restart empty. A holder that reaches only {A,B,D} (C and E
// cut off) then has a majority whose counters never saw f. Without the
// amnesia rule it is handed a fence <= f (the negative control); with it,
// it gets ErrFenceUnavailable, and once C is reachable again a fence > f.
func TestFenceAmnesiaInversion(t *testing.T) {
	const A, B, C, D, E = 0, 1, 2, 3, 4
	rs := testsrv.StartRedisN(t, 5)
	warm(t, newLocker(t, rs))
	key := locktest.Key(t)

	abc := view(t, rs, []int{A, B, C})
	var f uint64
	for range 5 {
		lock := mustAcquire(t, abc, key, 10*time.Second)
		f = lock.Fence()
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	restart(t, rs[A])
	restart(t, rs[B])

	off := view(t, rs, []int{A, B, D}, redlock.WithFenceAmnesiaRule(false))
	lock := mustAcquire(t, off, key, 10*time.Second)
	if lock.Fence() > f {
		t.Fatalf("rule off: fence %d after %d; the scenario did not reproduce the inversion", lock.Fence(), f)
	}
	t.Logf("rule off: fence %d after an earlier holder's %d: inversion", lock.Fence(), f)
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	on := view(t, rs, []int{A, B, D})
	_, err := on.TryAcquire(testCtx(t), key, 10*time.Second)
	if !errors.Is(err, redlock.ErrFenceUnavailable) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("rule on, {A,B,D}: got %v, want ErrFenceUnavailable", err)
	}
	if ks := keysOn(t, rs, key); len(ks) != 0 {
		t.Fatalf("refused acquisition left keys: %v", ks)
	}

	all := newLocker(t, rs)
	lock = mustAcquire(t, all, key, 10*time.Second)
	if lock.Fence() <= f {
		t.Fatalf("rule on, all nodes: fence %d not above %d", lock.Fence(), f)
	}
	lock.Release(testCtx(t))
	// Release returns once a majority deleted the key; Close waits for the
	// rest, which the {A,B,D} view below needs all of.
	all.Close()
	// The write-back made A and B trusted again for this key: the
	// {A,B,D} holder now gets a fence, and a larger one.
	prev := lock.Fence()
	lock = mustAcquire(t, on, key, 10*time.Second)
	if lock.Fence() <= prev {
		t.Fatalf("after the write-back, {A,B,D}: fence %d not above %d", lock.Fence(), prev)
	}
}

// A snapshot restore is amnesia too: the node comes back with its marker
// but with counters older than what it acknowledged. The marker names the
// server process (run_id) that wrote it, so the node is recognised as
// restarted and its counters stop counting.
func TestFenceSnapshotRestore(t *testing.T) {
	const A, B, C, D = 0, 1, 2, 3
	rs := testsrv.StartRedisN(t, 5, testsrv.RedisArgs("--save", "", "--appendonly", "no", "--dbfilename", "dump.rdb"))
	warm(t, newLocker(t, rs))
	key := locktest.Key(t)
	abc := view(t, rs, []int{A, B, C})
	first := mustAcquire(t, abc, key, 10*time.Second)
	first.Release(testCtx(t))
	for _, i := range []int{A, B} {
		if err := rs[i].Client(t).Save(testCtx(t)).Err(); err != nil { // snapshot at fence 1
			t.Fatal(err)
		}
	}
	var f uint64
	for range 4 {
		lock := mustAcquire(t, abc, key, 10*time.Second)
		f = lock.Fence()
		lock.Release(testCtx(t))
	}
	restart(t, rs[A]) // back with the snapshot: marker present, counter 1
	restart(t, rs[B])
	if n, _ := rs[A].Client(t).HGet(testCtx(t), redlock.FenceKey(key), "n").Int(); n >= int(f) {
		t.Fatalf("snapshot counter %d, want it behind %d for the test to mean anything", n, f)
	}

	_, err := view(t, rs, []int{A, B, D}).TryAcquire(testCtx(t), key, 10*time.Second)
	if !errors.Is(err, redlock.ErrFenceUnavailable) {
		t.Fatalf("{A,B,D} after a snapshot restore of A and B: got %v, want ErrFenceUnavailable", err)
	}
	lock := mustAcquire(t, newLocker(t, rs), key, 10*time.Second)
	if lock.Fence() <= f {
		t.Fatalf("fence %d not above %d", lock.Fence(), f)
	}
}

// F20: fences strictly increase across 1,000 successive holders while nodes
// are killed and restarted empty one at a time.
func TestFencesThroughRollingRestarts(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	// After PoolSize failed dials go-redis fails fast for up to a second
	// after the server is back; a large pool keeps a restarted node
	// reachable at once, so that only one node is out at any moment.
	bigPool := func(o *redis.Options) { o.PoolSize = 100000 }
	var lockers []*redlock.Locker
	for range 2 {
		cs := make([]redis.UniversalClient, len(rs))
		for i, r := range rs {
			cs[i] = client(t, r.Addr, bigPool)
		}
		l, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, l)
	}
	warm(t, lockers[0])
	key := locktest.Key(t)
	rng := rand.New(rand.NewPCG(1, 2))
	down := -1
	var last uint64
	restarts := 0
	for i := range 1000 {
		if i%25 == 0 {
			if down >= 0 {
				restart(t, rs[down])
				restarts++
				down = -1
			} else {
				down = rng.IntN(5)
				rs[down].Kill()
			}
		}
		var lock *dlock.Lock
		var err error
		for try := 0; try < 20; try++ {
			lock, err = lockers[i%2].TryAcquire(testCtx(t), key, 5*time.Second)
			if errors.Is(err, dlock.ErrNotAcquired) {
				// The last holder's Release returned once a majority
				// deleted the key; its other deletes may be under way
				// still, and with a node down that refuses this one.
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if !transient(err) {
				break
			}
		}
		if err != nil {
			t.Fatalf("holder %d (node %d down): %v", i, down, err)
		}
		if lock.Fence() <= last {
			t.Fatalf("holder %d: fence %d not above the previous %d", i, lock.Fence(), last)
		}
		last = lock.Fence()
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatalf("holder %d: release: %v", i, err)
		}
	}
	if restarts < 15 {
		t.Fatalf("only %d restarts", restarts)
	}
}
