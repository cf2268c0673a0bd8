package lockcheck

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// CloseKeepsLocks checks the promise of a backend whose Close (closeFn, on
// l) ends only what the Locker runs besides its locks: a lock taken before
// Close is still held after it, and truthfully so (Held, Extend; another
// Locker, other, is refused), it releases, and l still takes locks and
// waits for them (polling) afterwards. A backend whose Close ends its locks
// must instead declare every handle lost before it returns.
func CloseKeepsLocks(t *testing.T, l, other dlock.Locker, closeFn func() error) {
	t.Helper()
	key := Key(t)
	lock := MustAcquire(t, l, key, 10*time.Second)
	if err := closeFn(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !lock.Held() {
		t.Fatal("a lock taken before Close is not held after it, though Close keeps locks")
	}
	if err := lock.Extend(Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("Extend after Close: %v", err)
	}
	_, err := other.TryAcquire(Ctx(t), key, time.Second)
	WantError(t, err, dlock.ErrNotAcquired)
	if err := lock.Release(Ctx(t)); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}

	// Still usable: a wait through Acquire gets the lock once another
	// owner releases it.
	held := MustAcquire(t, other, key, 10*time.Second)
	time.AfterFunc(100*time.Millisecond, func() { held.Release(context.Background()) })
	again, err := dlock.Acquire(Ctx(t), l, key, time.Second, dlock.WithRetryDelay(20*time.Millisecond))
	if err != nil {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := again.Release(Ctx(t)); err != nil {
		t.Fatal(err)
	}
}
