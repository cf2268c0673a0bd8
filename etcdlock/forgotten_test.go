package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// TestForgottenLockFreed: a lock that is neither extended nor released is
// freed at its TTL (within a margin) even while another lock of the same
// Locker keeps their shared lease alive, and the next holder gets a higher
// fence.
func TestForgottenLockFreed(t *testing.T) {
	const ttl = 2 * time.Second
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	m := newLocker(t, c.Client(t))
	a, err := l.TryAcquire(ctx, "forgot-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	// a is forgotten from here on: never extended, never released.

	type result struct {
		lock *dlock.Lock
		err  error
		at   time.Time
	}
	got := make(chan result, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- dlock.Do(ctx, l, "forgot-b", ttl, func(fnCtx context.Context) error {
			// Keep b (and its lease, a's too) alive well past a's TTL,
			// until m has a or for 4 TTLs.
			go func() {
				w, err := dlock.Acquire(ctx, m, "forgot-a", ttl)
				got <- result{w, err, time.Now()}
			}()
			select {
			case r := <-got:
				got <- r
			case <-time.After(4 * ttl):
			case <-fnCtx.Done():
			}
			return nil
		})
	}()
	if err := <-doErr; err != nil {
		t.Fatalf("Do on b: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("another Locker's Acquire of a: %v", r.err)
	}
	if took := r.at.Sub(acquired); took > 2*ttl {
		t.Fatalf("the forgotten lock was freed %v after it was taken, want within 2x its TTL %v", took, ttl)
	}
	if r.lock.Fence() <= a.Fence() {
		t.Fatalf("fence %d after the forgotten lock's %d", r.lock.Fence(), a.Fence())
	}
	t.Logf("a (ttl %v) freed for another Locker %v after it was taken", ttl, r.at.Sub(acquired))
	lockcheck.WantError(t, a.Extend(ctx, ttl), dlock.ErrLockLost)
	if err := r.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The Locker takes a again, on the same lease (the same key name): the
	// forgotten handle's late Release touches neither the new key nor its
	// reservation.
	a2, err := l.TryAcquire(ctx, "forgot-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err == nil {
		t.Fatal("the forgotten handle's Release succeeded")
	}
	if err := a2.Extend(ctx, ttl); err != nil {
		t.Fatalf("a again, after the forgotten handle's Release: %v", err)
	}
	if _, err := m.TryAcquire(ctx, "forgot-a", ttl); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("another Locker on a while taken again: %v, want ErrNotAcquired", err)
	}
	if err := a2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
