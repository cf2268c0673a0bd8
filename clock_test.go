package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// A Grant with a Now method measures its lock on that clock: when the
// clock passes the validity, the handle is no longer held and refuses to
// extend, though no real time went by.
func TestGrantClock(t *testing.T) {
	clock := &fakeClock{}
	m := newMem()
	m.now = clock.now
	lock := mustTry(t, m, "k", time.Minute)
	clock.advance(59 * time.Second)
	if !lock.Held() {
		t.Fatalf("not held 59s into a 1m lock (remaining %v)", lock.Remaining())
	}
	clock.advance(time.Second)
	wantRefused(t, m, lock, dlock.ErrLockLost)
}

// doOnClock runs Do on m (whose clock the test moves) with a one-minute
// TTL, and a function that waits for its context or for stop. It returns
// the lock, once held, and the channel Do's result arrives on.
func doOnClock(t *testing.T, m *memLocker, stop <-chan struct{}) (*dlock.Lock, <-chan error) {
	t.Helper()
	held := make(chan *dlock.Lock, 1)
	done := make(chan error, 1)
	go func() {
		done <- dlock.Do(context.Background(), m, "k", time.Minute, func(ctx context.Context) error {
			held <- dlock.LockFromContext(ctx)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-stop:
				return nil
			}
		})
	}()
	select {
	case lock := <-held:
		return lock, done
	case err := <-done:
		t.Fatalf("Do: %v", err)
	}
	return nil, nil
}

// After the grant's clock jumped past the validity, driver.Recheck ends
// Do's function's context at once (a function blocked on Done, whose
// timers run on the machine's clock, would otherwise wait a minute), and
// the loss says the validity ran out.
func TestRecheckEndsDoAtOnce(t *testing.T) {
	clock, r := &fakeClock{}, &recorder{}
	m := newObserved(r.observe)
	m.now = clock.now
	lock, done := doOnClock(t, m, nil)
	clock.advance(time.Minute)
	driver.Recheck(lock)
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Do: %v, want ErrLockLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the function's context still alive 5s after Recheck found the validity spent")
	}
	if d := r.last(dlock.EventLost).Detected; d != "validity ran out" {
		t.Fatalf("loss detected as %q, want \"validity ran out\"", d)
	}
}

// After a jump that leaves validity but passes the extension threshold,
// driver.Recheck makes Do extend at once, as a process resumed after a
// pause would, and Do holds on.
func TestRecheckReschedulesExtension(t *testing.T) {
	clock := &fakeClock{}
	extended := make(chan struct{}, 1)
	m := newObserved(func(_ context.Context, e dlock.Event) {
		if e.Kind == dlock.EventExtended {
			select {
			case extended <- struct{}{}:
			default:
			}
		}
	})
	m.now = clock.now
	stop := make(chan struct{})
	lock, done := doOnClock(t, m, stop)
	clock.advance(40 * time.Second) // past half the TTL, Do's threshold
	driver.Recheck(lock)
	select {
	case <-extended:
	case <-time.After(5 * time.Second):
		t.Fatal("no extension within 5s of a Recheck past the extension threshold")
	}
	if r := lock.Remaining(); r < 50*time.Second {
		t.Fatalf("remaining %v after the extension, want about a minute", r)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("Do: %v", err)
	}
}
