package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testkit/eventtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The Locker meets the whole contract: every subtest of the conformance
// suite, the lapse and outage ones included.
func TestConformance(t *testing.T) {
	l := dlocktest.New()
	newLocker := func(*testing.T) dlock.Locker { return l }
	locktest.Run(t, newLocker, locktest.WithLapse(func(_ *testing.T, key string) { l.Lose(key) }))
	locktest.RunOutage(t, newLocker, func(*testing.T) (end func()) {
		l.Fail(nil)
		return l.Heal
	})
}

// Elections on the Locker name the leader and its term, and a
// resignation wakes the next candidate.
func TestElection(t *testing.T) {
	l := dlocktest.New()
	locktest.RunElection(t, func(*testing.T) dlock.Locker { return l },
		locktest.WithLapse(func(_ *testing.T, key string) { l.Lose(key) }))
}

// waitFor waits until r has seen an event of kind k, and returns the
// first.
func waitFor(t *testing.T, r *eventtest.Recorder, k dlock.EventKind) dlock.Event {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, ok := r.Wait(c, k)
	if !ok {
		t.Fatalf("no %s event within 5s", k)
	}
	return e
}

// inDo runs fn's body in dlock.Do on l in the background: it returns once
// the lock is held (WaitHeld), with the handle, and the channel Do's
// result arrives on. The function waits for its context, or for stop.
func inDo(t *testing.T, l *dlocktest.Locker, key string, ttl time.Duration, stop <-chan struct{}) (*dlock.Lock, <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- dlock.Do(context.Background(), l, key, ttl, func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-stop:
				return nil
			}
		})
	}()
	lock, err := l.WaitHeld(lockcheck.Ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return lock, done
}

// result waits for a result (of Do, of a waiter), failing the test after
// 5s.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no result within 5s")
	}
	return nil
}

// A bare TryAcquire reports its attempt and its grant or refusal, and the
// lock its release, as every backend's do.
func TestEvents(t *testing.T) {
	r := eventtest.New()
	eventtest.CheckTryAcquire(t, dlocktest.New(dlocktest.WithObserver(r.Observe)), r, "k", "dlocktest")
}

// Fences start at 1 for each key and grow by one with each grant, Hold's
// included.
func TestFencesPerKey(t *testing.T) {
	l := dlocktest.New()
	a := lockcheck.MustAcquire(t, l, "a", time.Minute)
	if _, err := l.Hold("b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	a2, b2 := lockcheck.MustAcquire(t, l, "a", time.Minute), (*dlock.Lock)(nil)
	if !l.Lose("b") {
		t.Fatal("Lose: b not held")
	}
	b2 = lockcheck.MustAcquire(t, l, "b", time.Minute)
	if a.Fence() != 1 || a2.Fence() != 2 || b2.Fence() != 2 {
		t.Fatalf("fences a %d, %d; b (after Hold) %d; want 1, 2; 2", a.Fence(), a2.Fence(), b2.Fence())
	}
}

// A key Hold made busy refuses the code under test, also a waiting
// Acquire, until its holder releases it, which wakes the waiter at once.
func TestHoldBusyUntilRelease(t *testing.T) {
	r := eventtest.New()
	l := dlocktest.New(dlocktest.WithObserver(r.Observe))
	other, err := l.Hold("job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold("job", time.Minute); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Hold of a held key: %v, want ErrNotAcquired", err)
	}
	if k := r.Kinds(); len(k) != 0 {
		t.Fatalf("the Locker's observer saw %v of Hold's, another owner's", k)
	}
	got := waiter(t, l, r, "job")
	err = dlock.Do(lockcheck.Ctx(t), l, "job", time.Minute, func(context.Context) error { return nil }, dlock.WithRetryCount(0))
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	start := time.Now()
	if err := other.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := result(t, got); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the waiter took %v after the release, with a one-minute retry delay", d)
	}
}

// waiter starts a dlock.Acquire of key on l, with a one-minute retry
// delay, that releases what it gets; it returns once the waiter's first
// attempt began (r observes l), with the channel its result arrives on.
func waiter(t *testing.T, l *dlocktest.Locker, r *eventtest.Recorder, key string) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		lock, err := dlock.Acquire(lockcheck.Ctx(t), l, key, time.Minute, dlock.WithRetryDelay(time.Minute))
		if err == nil {
			err = lock.Release(lockcheck.Ctx(t))
		}
		got <- err
	}()
	waitFor(t, r, dlock.EventAttempt)
	return got
}

// A key held until a time on the Locker's clock is free once Advance gets
// there, and the waiter is woken then.
func TestHoldUntilClockRunsOut(t *testing.T) {
	r := eventtest.New()
	l := dlocktest.New(dlocktest.WithObserver(r.Observe))
	if _, err := l.Hold("job", time.Hour); err != nil {
		t.Fatal(err)
	}
	got := waiter(t, l, r, "job")
	l.Advance(59 * time.Minute)
	select {
	case err := <-got:
		t.Fatalf("the waiter got the key before its holder's hour was over: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	l.Advance(time.Minute)
	if err := result(t, got); err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// Lose ends the holder's Do at once with ErrLockLost, its handle is lost
// for good, the key is free, and the observers see the loss.
func TestLose(t *testing.T) {
	r := eventtest.New()
	l := dlocktest.New(dlocktest.WithObserver(r.Observe))
	lock, done := inDo(t, l, "ledger", time.Minute, nil)
	if !l.Lose("ledger") {
		t.Fatal("Lose: not held")
	}
	lockcheck.WantError(t, result(t, done), dlock.ErrLockLost)
	if lock.Held() {
		t.Fatal("the lost handle reports held")
	}
	lockcheck.WantError(t, lock.Extend(lockcheck.Ctx(t), time.Minute), dlock.ErrLockLost)
	if next := lockcheck.MustAcquire(t, l, "ledger", time.Minute); next.Fence() <= lock.Fence() {
		t.Fatalf("the next holder's fence %d is not above the lost one's %d", next.Fence(), lock.Fence())
	}
	if e := waitFor(t, r, dlock.EventLost); e.Detected != "session gone" || e.Backend != "dlocktest" {
		t.Fatalf("loss event %+v, want detected \"session gone\" on backend %q", e, "dlocktest")
	}
	if l.Lose("ledger-free") {
		t.Fatal("Lose of a key nobody holds reported true")
	}
}

// A Lose as soon as WaitHeld sees the grant reaches the observers, after
// the grant, even when it comes before the attempt has returned (the
// Locker's observers are attached to the lock as it returns): each round
// races the two, and a few in a hundred fall in that window.
func TestLoseAtGrant(t *testing.T) {
	const rounds = 500
	missed := 0
	for range rounds {
		r := eventtest.New()
		l := dlocktest.New(dlocktest.WithObserver(r.Observe))
		got := make(chan *dlock.Lock, 1)
		go func() {
			lock, _ := l.TryAcquire(context.Background(), "k", time.Minute)
			got <- lock
		}()
		if _, err := l.WaitHeld(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		l.Lose("k")
		if lock := <-got; lock == nil || lock.Held() {
			t.Fatalf("TryAcquire returned %v, want the lock Lose took away", lock)
		}
		// Both have returned: the events are delivered.
		ks := r.Kinds()
		if i := slices.Index(ks, "lost"); i < 0 {
			missed++
		} else if i < slices.Index(ks, "granted") {
			t.Fatalf("events %v: the loss before the grant", ks)
		}
	}
	if missed > 0 {
		t.Fatalf("%d of %d losses right after the grant reached no observer", missed, rounds)
	}
}

// WaitHeld ends with its context when nobody takes the key.
func TestWaitHeldContext(t *testing.T) {
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := dlocktest.New().WaitHeld(c, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitHeld: %v, want DeadlineExceeded", err)
	}
}

// FailNext fails that many requests, with the error given (and a
// NodeError), then the Locker works again; a waiting Acquire rides it out.
func TestFailNext(t *testing.T) {
	l := dlocktest.New()
	reason := errors.New("WRONGPASS")
	l.FailNext(2, fmt.Errorf("%w: %w", dlock.ErrUnavailable, reason))
	for range 2 {
		_, err := l.TryAcquire(lockcheck.Ctx(t), "k", time.Minute)
		lockcheck.WantError(t, err, dlock.ErrUnavailable, reason)
		var ne *dlock.NodeError
		if !errors.As(err, &ne) || ne.Node != "dlocktest" {
			t.Fatalf("%v: no NodeError naming %q", err, "dlocktest")
		}
	}
	lockcheck.MustAcquire(t, l, "k", time.Minute)

	l.FailNext(3, nil)
	lock, err := dlock.Acquire(lockcheck.Ctx(t), l, "k2", time.Minute, dlock.WithRetryDelay(time.Millisecond))
	if err != nil {
		t.Fatalf("Acquire through 3 failed attempts: %v", err)
	}
	l.FailNext(1, nil)
	lockcheck.WantError(t, lock.Extend(lockcheck.Ctx(t), time.Minute), dlock.ErrUnavailable)
	if !lock.Held() {
		t.Fatal("a failed extension ended the handle")
	}
	if err := lock.Extend(lockcheck.Ctx(t), time.Minute); err != nil {
		t.Fatalf("Extend after the failure: %v", err)
	}
	l.FailNext(5, nil)
	l.FailNext(0, nil) // cancels
	if err := lock.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Release after FailNext(0): %v", err)
	}
}

// During an outage (Fail), Do's extensions fail and it ends its function's
// context when the validity runs out; Do's release fails too, so after
// Heal the key is free only once its TTL ran out on the server.
func TestFailUntilHealed(t *testing.T) {
	l := dlocktest.New()
	lock, done := inDo(t, l, "k", time.Minute, nil)
	l.Fail(nil)
	l.Advance(40 * time.Second) // Do extends at once, and fails
	select {
	case err := <-done:
		t.Fatalf("Do returned with validity left: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	l.Advance(19500 * time.Millisecond) // past the validity, not the TTL
	lockcheck.WantError(t, result(t, done), dlock.ErrLockLost)
	if lock.Held() {
		t.Fatal("handle held after its validity ran out in an outage")
	}
	_, err := l.TryAcquire(lockcheck.Ctx(t), "k", time.Minute)
	lockcheck.WantError(t, err, dlock.ErrUnavailable)
	l.Heal()
	_, err = l.TryAcquire(lockcheck.Ctx(t), "k", time.Minute)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	l.Advance(time.Second)
	lockcheck.MustAcquire(t, l, "k", time.Minute)
}

// Advance runs a TTL out without sleeping: the handle is held up to its
// validity and lost after it, and the key is free for another owner.
func TestAdvanceRunsTTLOut(t *testing.T) {
	l := dlocktest.New()
	lock := lockcheck.MustAcquire(t, l, "k", 30*time.Second)
	l.Advance(29 * time.Second)
	if !lock.Held() {
		t.Fatalf("not held 29s into a 30s lock (remaining %v)", lock.Remaining())
	}
	_, err := l.TryAcquire(lockcheck.Ctx(t), "k", time.Minute)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	l.Advance(time.Second)
	if lock.Held() {
		t.Fatal("held after its TTL ran out on the Locker's clock")
	}
	lockcheck.WantError(t, lock.Extend(lockcheck.Ctx(t), time.Minute), dlock.ErrLockLost)
	lockcheck.MustAcquire(t, l, "k", time.Minute)
	l.Advance(-time.Hour) // the clock does not go back
	if ahead := time.Until(l.Now()); ahead < 29*time.Second {
		t.Fatal("Advance with a negative duration moved the clock back")
	}
}

// A jump past the validity ends Do's function's context at once (its
// timers would wait a minute), detected as "validity ran out".
func TestAdvanceEndsDo(t *testing.T) {
	r := eventtest.New()
	l := dlocktest.New(dlocktest.WithObserver(r.Observe))
	_, done := inDo(t, l, "k", time.Minute, nil)
	l.Advance(time.Minute)
	lockcheck.WantError(t, result(t, done), dlock.ErrLockLost)
	if e := waitFor(t, r, dlock.EventLost); e.Detected != "validity ran out" {
		t.Fatalf("loss detected as %q, want \"validity ran out\"", e.Detected)
	}
}

// A jump that leaves validity but passes Do's threshold makes Do extend at
// once, and hold on.
func TestAdvanceExtendsDo(t *testing.T) {
	r := eventtest.New()
	l := dlocktest.New(dlocktest.WithObserver(r.Observe))
	stop := make(chan struct{})
	lock, done := inDo(t, l, "k", time.Minute, stop)
	l.Advance(40 * time.Second)
	waitFor(t, r, dlock.EventExtended)
	if rem := lock.Remaining(); rem < 50*time.Second {
		t.Fatalf("remaining %v after the extension, want about a minute", rem)
	}
	l.Advance(40 * time.Second)
	if !lock.Held() {
		t.Fatal("lost 80s into a lock Do extended at 40s")
	}
	close(stop)
	if err := result(t, done); err != nil {
		t.Fatalf("Do: %v", err)
	}
}

// Observers run under none of the Locker's mutexes: one that calls back
// into the Locker on every event (Hold, Lose, Advance, WaitHeld,
// TryAcquire) does not deadlock it.
func TestObserverCallsBack(t *testing.T) {
	var l *dlocktest.Locker
	var calls sync.WaitGroup
	l = dlocktest.New(dlocktest.WithObserver(func(ctx context.Context, e dlock.Event) {
		switch e.Kind {
		case dlock.EventGranted:
			l.Advance(time.Millisecond)
			l.WaitHeld(context.Background(), e.Key)
			if other, err := l.Hold(e.Key+":other", time.Minute); err == nil {
				other.Release(context.Background())
			}
		case dlock.EventExtended:
			l.Lose(e.Key)
		case dlock.EventLost:
			if lock, err := l.TryAcquire(context.Background(), e.Key+":after", time.Minute); err == nil {
				lock.Release(context.Background())
			}
		}
	}))
	calls.Go(func() {
		err := dlock.Do(context.Background(), l, "k", time.Minute, func(ctx context.Context) error {
			if err := dlock.LockFromContext(ctx).Extend(ctx, time.Minute); err != nil {
				return err
			}
			<-ctx.Done()
			return context.Cause(ctx)
		})
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("Do: %v, want ErrLockLost (the observer took the lock away)", err)
		}
	})
	finished := make(chan struct{})
	go func() { calls.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("deadlock: an observer calling back into the Locker")
	}
}

// Everything at once under the race detector: Do, TryAcquire, Lose,
// Advance and faults from several goroutines; no two functions inside Do
// ever have live contexts at once.
func TestConcurrentControls(t *testing.T) {
	l := dlocktest.New()
	var mu sync.Mutex
	var holders []context.Context // the contexts of the functions inside Do
	runs := 0
	enter := func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range holders {
			if h.Err() == nil && ctx.Err() == nil {
				t.Error("two functions inside Do with live contexts at once")
			}
		}
		holders = append(holders, ctx)
		runs++
	}
	leave := func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		for i, h := range holders {
			if h == ctx {
				holders = append(holders[:i], holders[i+1:]...)
				return
			}
		}
	}
	var wg sync.WaitGroup
	// A release that an injected fault failed leaves the key held until
	// its TTL: the waits end with stop.
	running, stopWorkers := context.WithCancel(context.Background())
	stop := running.Done()
	for range 4 {
		wg.Go(func() {
			for running.Err() == nil {
				dlock.Do(running, l, "k", time.Minute, func(ctx context.Context) error {
					enter(ctx)
					defer leave(ctx)
					time.Sleep(time.Millisecond)
					return nil
				}, dlock.WithRetryDelay(time.Millisecond))
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 3 {
			case 0:
				l.Lose("k")
			case 1:
				l.Advance(time.Second)
			case 2:
				l.FailNext(1, nil)
			}
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(300 * time.Millisecond)
	stopWorkers()
	wg.Wait()
	if runs < 10 {
		t.Fatalf("%d runs inside Do in 300ms, want the workers to contend", runs)
	}
}
