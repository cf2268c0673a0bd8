package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// A key that is not used while the nodes restart one by one loses its
// trusted majority once three of five rejoined. Rejoin after each restart
// prevents that; when it was not run, it refuses (counters may be lost) and
// Reseed is the operator's way out.
func TestRejoinAndReseed(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l := newLocker(t, rs)
	warm(t, l)
	const cold = "cold-key"
	var last uint64
	for range 3 {
		lock := mustAcquire(t, l, cold, time.Second)
		last = lock.Fence()
		lock.Release(testCtx(t))
	}

	for i := range 3 { // rolling restart with Rejoin after each node
		restart(t, rs[i])
		n, err := l.Rejoin(testCtx(t))
		if err != nil || n != 1 {
			t.Fatalf("Rejoin after restarting node %d: %d, %v; want 1 node", i, n, err)
		}
	}
	lock := mustAcquire(t, l, cold, time.Second)
	if lock.Fence() <= last {
		t.Fatalf("cold key after rejoins: fence %d not above %d", lock.Fence(), last)
	}
	last = lock.Fence()
	lock.Release(testCtx(t))
	if n, err := l.Rejoin(testCtx(t)); n != 0 || err != nil {
		t.Fatalf("Rejoin with nothing to do: %d, %v", n, err)
	}

	for i := 2; i < 5; i++ { // the same without Rejoin
		restart(t, rs[i])
	}
	if _, err := l.TryAcquire(testCtx(t), cold, time.Second); !errors.Is(err, redlock.ErrFenceUnavailable) {
		t.Fatalf("cold key after 3 restarts without Rejoin: got %v, want ErrFenceUnavailable", err)
	}
	_, err := l.Rejoin(testCtx(t))
	if !errors.Is(err, redlock.ErrFenceUnavailable) || !strings.Contains(err.Error(), cold) {
		t.Fatalf("Rejoin after a majority lost its counters: got %v, want ErrFenceUnavailable naming %q", err, cold)
	}
	if _, err := l.TryAcquire(testCtx(t), cold, time.Second); !errors.Is(err, redlock.ErrFenceUnavailable) {
		t.Fatalf("a refused Rejoin trusted something: %v", err)
	}

	if _, err := l.Reseed(testCtx(t), 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Reseed(0): got %v, want ErrInvalid", err)
	}
	const floor = 1_000_000_000_000_000 // above 2^49: no float formatting may round it
	if n, err := l.Reseed(testCtx(t), floor); err != nil || n != 5 {
		t.Fatalf("Reseed: %d, %v", n, err)
	}
	lock = mustAcquire(t, l, cold, time.Second)
	if lock.Fence() != floor+1 {
		t.Fatalf("after Reseed(%d): fence %d, want %d", uint64(floor), lock.Fence(), uint64(floor+1))
	}
	lock.Release(testCtx(t))
	lock = mustAcquire(t, l, cold, time.Second)
	if lock.Fence() != floor+2 {
		t.Fatalf("second grant after Reseed: fence %d, want %d", lock.Fence(), uint64(floor+2))
	}
	lock.Release(testCtx(t))

	rs[0].Kill()
	if _, err := l.Rejoin(testCtx(t)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Rejoin with a node down: got %v, want ErrUnavailable", err)
	}
}

// A new cluster used for the first time while a node is down cannot tell
// that it is new (it could be a majority that lost its data while the node
// holding the fences is away): no fence yet, and no decision either, so
// that once every node answers the cluster is recognised as new.
func TestNewClusterWithNodeDown(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l := newLocker(t, rs)
	rs[4].Kill()
	key := "first-key"
	if _, err := l.TryAcquire(testCtx(t), key, time.Second); !errors.Is(err, redlock.ErrFenceUnavailable) {
		t.Fatalf("first use with a node down: got %v, want ErrFenceUnavailable", err)
	}
	restart(t, rs[4])
	lock := mustAcquire(t, l, key, time.Second)
	if lock.Fence() != 1 {
		t.Fatalf("first fence of a new cluster: %d, want 1", lock.Fence())
	}
}
