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

// TestCloseLosesHandles: Close revokes the leases of the Locker's locks,
// so every handle on them is lost by the time it returns: Held is false,
// Extend fails with ErrLockLost, and Do's function sees its context ended
// with ErrLockLost. Another Locker takes the locks at once.
func TestCloseLosesHandles(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	held, err := l.TryAcquire(ctx, "close-a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// One lock on a lease of its own TTL, extended beyond it.
	long, err := l.TryAcquire(ctx, "close-b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	inFn := make(chan context.Context)
	closed := make(chan struct{})
	doErr := make(chan error, 1)
	go func() {
		doErr <- dlock.Do(ctx, l, "close-c", 10*time.Second, func(fnCtx context.Context) error {
			inFn <- fnCtx
			<-closed
			return nil
		})
	}()
	fnCtx := <-inFn
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, lock := range []*dlock.Lock{held, long} {
		if lock.Held() {
			t.Errorf("%s: Held after Close", lock.Key())
		}
		lockcheck.WantError(t, lock.Extend(ctx, 10*time.Second), dlock.ErrLockLost)
	}
	if fnCtx.Err() == nil || !errors.Is(context.Cause(fnCtx), dlock.ErrLockLost) {
		t.Errorf("Do's function context after Close: %v (cause %v), want ended with ErrLockLost", fnCtx.Err(), context.Cause(fnCtx))
	}
	close(closed)
	lockcheck.WantError(t, <-doErr, dlock.ErrLockLost)
	other := newLocker(t, c.Client(t))
	for _, key := range []string{"close-a", "close-b", "close-c"} {
		lock, err := other.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatalf("another Locker on %s after Close: %v", key, err)
		}
		lock.Release(ctx)
	}
	// The Locker is still usable.
	again, err := l.TryAcquire(ctx, "close-a", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
