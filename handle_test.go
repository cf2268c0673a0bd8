package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

func mustTry(t *testing.T, m *memLocker, key string, ttl time.Duration) *dlock.Lock {
	t.Helper()
	lock, err := m.TryAcquire(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return lock
}

// wantRefused checks that lock reports itself gone and that an Extend is
// refused without reaching the server.
func wantRefused(t *testing.T, m *memLocker, lock *dlock.Lock, want error) {
	t.Helper()
	if lock.Held() || lock.Remaining() != 0 {
		t.Fatalf("handle reports held (remaining %v)", lock.Remaining())
	}
	before := m.extends.Load()
	lockcheck.WantError(t, lock.Extend(context.Background(), time.Minute), want)
	if n := m.extends.Load() - before; n != 0 {
		t.Fatalf("Extend of a handle that is not held reached the server %d times", n)
	}
}

// A lock whose key was taken over stays lost when a later Release fails on
// the network: it is not held again and sends no more extensions.
func TestLostHandleStaysLostAfterFailedRelease(t *testing.T) {
	m := newMem()
	lock := mustTry(t, m, "k", time.Minute)
	m.free("k")
	mustTry(t, m, "k", time.Minute) // another owner
	lockcheck.WantError(t, lock.Extend(context.Background(), time.Minute), dlock.ErrNotHeld)

	m.release = func(context.Context) error { return unavailable("n1") }
	lockcheck.WantError(t, lock.Release(context.Background()), dlock.ErrUnavailable)
	wantRefused(t, m, lock, dlock.ErrNotHeld)
}

// A Release whose outcome is unknown may be retried, but the handle is not
// held in between, and the retry completes it.
func TestUnknownReleaseIsRetriedNotRevived(t *testing.T) {
	m := newMem()
	lock := mustTry(t, m, "k", time.Minute)
	var fail sync.Once
	m.release = func(context.Context) error {
		err := error(nil)
		fail.Do(func() { err = fmt.Errorf("%w: %w", dlock.ErrUnavailable, context.DeadlineExceeded) })
		return err
	}
	lockcheck.WantError(t, lock.Release(context.Background()), dlock.ErrUnavailable, context.DeadlineExceeded)
	wantRefused(t, m, lock, dlock.ErrNotHeld)
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("retried Release: %v", err)
	}
	if !m.expires("k").IsZero() {
		t.Fatal("retried Release left the key on the server")
	}
	lockcheck.WantError(t, lock.Release(context.Background()), dlock.ErrNotHeld)
}

// Release of a lost handle still asks the server: the key may still be
// there, and deleting it spares the next owner the rest of the TTL.
func TestReleaseOfLostHandleTriesServer(t *testing.T) {
	m := newMem()
	hang := make(chan struct{})
	m.extend = func(ctx context.Context, _ time.Duration) error { <-hang; return unavailable("n1") }
	lock := mustTry(t, m, "k", 100*time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- lock.Extend(context.Background(), time.Minute) }()
	time.Sleep(200 * time.Millisecond) // validity runs out while the extension hangs
	close(hang)
	<-done
	if lock.Held() {
		t.Fatal("held after its validity ran out")
	}
	m.mu.Lock()
	m.keys["k"] = memKey{token: lock.Token(), expires: time.Now().Add(time.Minute)} // still there after all
	m.mu.Unlock()
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("Release of a lost handle whose key is still there: %v", err)
	}
	if m.releases.Load() != 1 || !m.expires("k").IsZero() {
		t.Fatalf("Release of a lost handle: %d releases reached the server, key expires %v", m.releases.Load(), m.expires("k"))
	}
}

// A backend that says the lock's session is gone (ErrLockLost) ends the
// handle, on Extend and on Release; neither is retried.
func TestBackendLossEndsHandle(t *testing.T) {
	sessionGone := fmt.Errorf("%w: the session ended", dlock.ErrLockLost)
	t.Run("Extend", func(t *testing.T) {
		m := newMem()
		m.extend = func(context.Context, time.Duration) error { return sessionGone }
		lock := mustTry(t, m, "k", time.Minute)
		lockcheck.WantError(t, lock.Extend(context.Background(), time.Minute), dlock.ErrLockLost, sessionGone)
		wantRefused(t, m, lock, dlock.ErrLockLost)
	})
	t.Run("Release", func(t *testing.T) {
		m := newMem()
		var calls int
		m.release = func(context.Context) error { calls++; return sessionGone }
		lock := mustTry(t, m, "k", time.Minute)
		lockcheck.WantError(t, lock.Release(context.Background()), dlock.ErrLockLost, sessionGone)
		wantRefused(t, m, lock, dlock.ErrLockLost)
		lockcheck.WantError(t, lock.Release(context.Background()), dlock.ErrNotHeld)
		if calls != 1 {
			t.Fatalf("Release after the backend reported the session gone was sent again (%d calls)", calls)
		}
	})
}

// A backend that declares a held lock lost (driver.Lost) ends the handle at
// once, without a request: Held is false, Extend returns the cause, Do's
// function sees its context end with it; a lost or released lock is left
// as it is.
func TestDeclaredLost(t *testing.T) {
	cause := fmt.Errorf("dlock: %w: the backend revoked its session", dlock.ErrLockLost)
	m := newMem()
	lock := mustTry(t, m, "k", time.Minute)
	driver.Lost(lock, cause)
	wantRefused(t, m, lock, dlock.ErrLockLost)
	lockcheck.WantError(t, lock.Extend(context.Background(), time.Minute), dlock.ErrLockLost, cause)

	released := mustTry(t, m, "r", time.Minute)
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	driver.Lost(released, cause)
	lockcheck.WantError(t, released.Extend(context.Background(), time.Minute), dlock.ErrNotHeld)

	err := dlock.Do(context.Background(), m, "d", time.Minute, func(ctx context.Context) error {
		driver.Lost(dlock.LockFromContext(ctx), cause)
		if ctx.Err() == nil || !errors.Is(context.Cause(ctx), cause) {
			return fmt.Errorf("after driver.Lost: context %v, cause %v", ctx.Err(), context.Cause(ctx))
		}
		return nil
	})
	lockcheck.WantError(t, err, dlock.ErrLockLost, cause)
}

// Two Extends on one handle: a slow one with a long TTL whose reply comes
// after a quick one with a short TTL must not leave the handle believing
// the long TTL, since the server applied the short one last.
func TestConcurrentExtendsNeverOutliveServer(t *testing.T) {
	m := newMem()
	lock := mustTry(t, m, "k", time.Minute)
	slowApplied, slowReply := make(chan struct{}), make(chan struct{})
	m.extended = func(_ context.Context, ttl time.Duration) error {
		if ttl == 10*time.Second {
			close(slowApplied)
			<-slowReply
		}
		return nil
	}
	slow := make(chan error, 1)
	go func() { slow <- lock.Extend(context.Background(), 10*time.Second) }()
	<-slowApplied
	quick := make(chan error, 1)
	go func() { quick <- lock.Extend(context.Background(), time.Second) }()
	var quickErr error
	quickDone := false
	select {
	case quickErr = <-quick: // not serialized behind the slow one
		quickDone = true
	case <-time.After(300 * time.Millisecond): // waiting its turn
	}
	close(slowReply)
	if err := <-slow; err != nil {
		t.Fatalf("slow Extend: %v", err)
	}
	if !quickDone {
		quickErr = <-quick
	}
	if quickErr != nil {
		t.Fatalf("quick Extend: %v", quickErr)
	}
	if until, expires := lock.ValidUntil(), m.expires("k"); until.After(expires) {
		t.Fatalf("handle valid until %v past the server's expiry %v", until.Sub(expires), expires.Format(time.StampMicro))
	}
}

// An Extend whose outcome is unknown may have set its TTL on the server: a
// shorter TTL than the validity left lowers ValidUntil to what it could
// have set.
func TestUnknownExtendLowersValidity(t *testing.T) {
	m := newMem()
	m.extended = func(context.Context, time.Duration) error { return unavailable("n1") } // applied, reply lost
	lock := mustTry(t, m, "k", 10*time.Second)
	lockcheck.WantError(t, lock.Extend(context.Background(), 300*time.Millisecond), dlock.ErrUnavailable)
	if until, expires := lock.ValidUntil(), m.expires("k"); until.After(expires) {
		t.Fatalf("after an unknown extension to 300ms the handle is valid %v past the server's expiry", until.Sub(expires))
	}
	if !lock.Held() {
		t.Fatal("an unknown extension ended the handle; it is still held within the shorter validity")
	}
}

// A Release waits for an Extend in flight on the same handle (a backend's
// grant is never called concurrently with itself), and the Extend's late
// success does not make the handle held again.
func TestReleaseWaitsForExtensionInFlight(t *testing.T) {
	m := newMem()
	inFlight, reply := make(chan struct{}), make(chan struct{})
	var busy sync.Mutex // held while a grant call runs: a second one would find it taken
	overlap := make(chan struct{}, 1)
	enter := func() {
		if !busy.TryLock() {
			overlap <- struct{}{}
			return
		}
		busy.Unlock()
	}
	m.extended = func(context.Context, time.Duration) error {
		busy.Lock()
		close(inFlight)
		<-reply
		busy.Unlock()
		return nil
	}
	m.release = func(context.Context) error { enter(); return nil }
	lock := mustTry(t, m, "k", time.Minute)
	ext := make(chan error, 1)
	go func() { ext <- lock.Extend(context.Background(), time.Minute) }()
	<-inFlight
	rel := make(chan error, 1)
	go func() { rel <- lock.Release(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // give an unserialized Release the time to overlap
	if lock.Held() {
		t.Error("handle held while its Release is pending")
	}
	close(reply)
	if err := <-ext; err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend overtaken by Release: %v, want nil or ErrNotHeld", err)
	}
	if err := <-rel; err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-overlap:
		t.Fatal("Release ran while an Extend on the same handle was in flight")
	default:
	}
	if lock.Held() || !m.expires("k").IsZero() {
		t.Fatalf("after Release: held %v, key expires %v", lock.Held(), m.expires("k"))
	}
}

// A call that waits for the handle's turn returns when its context ends,
// sending nothing; the calls that wait on go in turn when the call in
// flight returns, one at a time.
func TestTurnWaitEndsWithContext(t *testing.T) {
	m := newMem()
	inFlight, reply := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32 // grant calls running at once
	overlap := make(chan struct{}, 3)
	var sentAfterGivingUp atomic.Bool
	m.extended = func(_ context.Context, ttl time.Duration) error {
		sentAfterGivingUp.CompareAndSwap(false, ttl == 2*time.Minute)
		if calls.Add(1) > 1 {
			overlap <- struct{}{}
		}
		defer calls.Add(-1)
		if ttl == time.Hour {
			close(inFlight)
			<-reply
		} else {
			time.Sleep(50 * time.Millisecond) // room for an overlap
		}
		return nil
	}
	lock := mustTry(t, m, "k", time.Minute)
	first := make(chan error, 1)
	go func() { first <- lock.Extend(context.Background(), time.Hour) }()
	<-inFlight
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- lock.Extend(ctx, 2*time.Minute) }()
	waiting := make(chan error, 2)
	for range 2 {
		go func() { waiting <- lock.Extend(context.Background(), time.Minute) }()
	}
	cancel()
	lockcheck.WantError(t, <-gaveUp, dlock.ErrUnavailable)
	if sentAfterGivingUp.Load() {
		t.Fatal("the call whose context ended while waiting for the turn was sent")
	}
	close(reply)
	for _, c := range []chan error{first, waiting, waiting} {
		if err := <-c; err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	select {
	case <-overlap:
		t.Fatal("two calls into the grant ran at once")
	default:
	}
}
