package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// A release by token that does not hear from the node whose draw was the
// lock's fence (its clock 2s ahead, well within the clock assumption with a
// 10s TTL) must not leave the other nodes' counters below that fence: the
// next grant on them draws above it.
func TestReleaseTokenWithoutTheFenceNode(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	a := newLocker(t, rs)
	a.SetClockOffset(0, 2_000_000)
	key := lockcheck.Key(t)
	la := mustAcquire(t, a, key, 10*time.Second)
	now := time.Now().UnixMicro()
	if int64(la.Fence()) < now+1_000_000 {
		t.Fatalf("A's fence %d does not come from node 0's clock (now %d): the test shows nothing", la.Fence(), now)
	}
	rs[0].Kill()
	// Another process releases by token (the CLI's `dlock release`).
	r := newLocker(t, rs)
	if err := r.ReleaseToken(testCtx(t), key, la.Token()); err != nil {
		t.Fatalf("ReleaseToken with one node of three down: %v", err)
	}
	b := newLocker(t, rs)
	lb := mustAcquire(t, b, key, 10*time.Second)
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fence went backwards: B's %d after A's %d (released by token without node 0)", lb.Fence(), la.Fence())
	}
}

// The counters' TTL bounds the clock assumption (a counter raised at
// release that expired is gone a fence TTL later), so WithFenceTTL rejects
// one too short for any clock agreement to hold.
func TestShortFenceTTLRejected(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	for _, d := range []time.Duration{time.Millisecond, 100 * time.Millisecond, 499 * time.Millisecond} {
		_, err := redlock.New(clients(t, rs), redlock.WithFenceTTL(d))
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("WithFenceTTL(%v): %v, want dlock.ErrInvalid", d, err)
		}
	}
	if _, err := redlock.New(clients(t, rs), redlock.WithFenceTTL(500*time.Millisecond), redlock.WithLogger(quietLogger())); err != nil {
		t.Errorf("WithFenceTTL(500ms): %v", err)
	}
}

// A release by token whose context already ended cannot read the counters:
// it must not delete the keys without raising them (the next grant would
// draw below the lock's fence, drawn by a node whose clock is 2s ahead,
// once that node is down).
func TestReleaseTokenCancelledKeepsFences(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	a := newLocker(t, rs)
	a.SetClockOffset(0, 2_000_000)
	key := lockcheck.Key(t)
	la := mustAcquire(t, a, key, 10*time.Second)
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	r := newLocker(t, rs)
	if err := r.ReleaseToken(ctx, key, la.Token()); err == nil {
		t.Fatal("ReleaseToken with a cancelled context: nil error")
	}
	r.Close()    // deletions still under way, if any
	rs[0].Kill() // the next grant comes from the other two
	b := newLocker(t, rs)
	lb, err := b.TryAcquire(testCtx(t), key, 10*time.Second)
	switch {
	case err == nil && lb.Fence() <= la.Fence():
		t.Fatalf("fence went backwards: B's %d after A's %d (released by token with a cancelled context)", lb.Fence(), la.Fence())
	case err != nil && !errors.Is(err, dlock.ErrNotAcquired):
		t.Fatalf("TryAcquire: %v", err)
	}
}
