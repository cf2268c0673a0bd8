package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/pglock"
)

// A permit is a session lock on its slot's name: a terminated session is a
// lost permit, which the handle reports and the next holder gets.
func TestSemaphoreTerminatedSession(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueKey(t)
	holder, next := newLocker(t, 2), newLocker(t, 2)
	lock, err := dlock.Semaphore(holder, 1).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	_, err = dlock.Semaphore(next, 1).TryAcquire(ctx, name, 10*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)

	terminate(t, pglock.HashKey(lock.Key()))
	lockcheck.WantError(t, lock.Extend(ctx, 10*time.Second), dlock.ErrLockLost)
	again, err := dlock.Semaphore(next, 1).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatalf("the terminated holder's permit did not come back: %v", err)
	}
	defer again.Release(context.Background())
	if again.Slot() != lock.Slot() || again.Fence() <= lock.Fence() {
		t.Fatalf("next permit: slot %d fence %d; the lost one: slot %d fence %d", again.Slot(), again.Fence(), lock.Slot(), lock.Fence())
	}
}

// Each permit pins a connection of the Locker's pool: once its permits pin
// them all, an attempt fails at once with ErrPoolExhausted, also within a
// wait, rather than wait for a connection the caller itself may hold.
func TestSemaphorePinsConnections(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueKey(t)
	l := newLocker(t, 2)
	sem := dlock.Semaphore(l, 3)
	for range 2 {
		lock, err := sem.TryAcquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(context.Background())
	}
	start := time.Now()
	_, err := dlock.Acquire(ctx, sem, name, 10*time.Second)
	lockcheck.WantError(t, err, dlock.ErrUnavailable, pglock.ErrPoolExhausted)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("an exhausted pool took %v to be reported", d)
	}
	other, err := dlock.Semaphore(newLocker(t, 2), 3).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatalf("another Locker's pool: %v", err)
	}
	other.Release(ctx)
}

// Inspect names a permit by its slot's key when its holder published it
// (WithHolderInfo), and gives the limit recorded.
func TestSemaphoreInspect(t *testing.T) {
	ctx := testCtx(t)
	name := uniqueKey(t)
	l := newLocker(t, 2, pglock.WithHolderInfo("inspect"))
	lock, err := dlock.Semaphore(l, 3).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	infos, err := newLocker(t, 1).Inspect(ctx, "{"+name+"}#*", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != lock.Key() || infos[0].Limit != 3 {
		t.Fatalf("Inspect: %+v; want the permit on %q with limit 3", infos, lock.Key())
	}
}

// A session lock's validity sets no drift margin aside, so a ttl of 1ms,
// inside the Redis backends' margin, is a valid argument for a lock's and
// a permit's attempt and Extend (which may still fail for taking longer
// than the ttl).
func TestShortTTLAccepted(t *testing.T) {
	l := newLocker(t, 3)
	for name, lk := range map[string]dlock.Locker{"lock": l, "permit": dlock.Semaphore(l, 2)} {
		ctx, key := testCtx(t), uniqueKey(t)+name
		if lock, err := lk.TryAcquire(ctx, key, time.Millisecond); errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s with ttl 1ms: %v", name, err)
		} else if err == nil {
			_ = lock.Release(context.Background())
		}
		lock, err := lk.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Extend(ctx, time.Millisecond); errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s's Extend with ttl 1ms: %v", name, err)
		}
		_ = lock.Release(context.Background())
	}
}
