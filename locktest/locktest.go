// Package locktest is the conformance suite for authors of dlock backends:
// it states the contract of dlock.Locker and dlock.Lock once, in tests that
// talk to the backend's real servers. Every backend in this repository runs
// it, and a backend written elsewhere proves itself with the same call:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T) dlock.Locker { return newLocker(t) },
//			locktest.WithLapse(deleteKeyBehindTheHoldersBack))
//	}
//
// Package driver has what a backend needs to implement the contract.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// Option adapts the suite to a backend.
type Option func(*suite)

// WithLapse gives the suite a way to make the lock on key lapse on the
// server behind its holder's back: delete the Redis key, terminate the
// Postgres session. Without it the suite waits for the TTL to run out, which
// only works for backends whose servers expire locks.
func WithLapse(lapse func(t *testing.T, key string)) Option {
	return func(s *suite) { s.lapse = lapse }
}

type suite struct {
	newLocker func(t *testing.T) dlock.Locker
	lapse     func(t *testing.T, key string)
	outage    func(t *testing.T) (end func())
}

// Run runs the conformance suite as subtests of t. newLocker returns a
// fresh Locker with its own client (connection pool), as a separate process
// would have, and registers its cleanup with t.
func Run(t *testing.T, newLocker func(t *testing.T) dlock.Locker, opts ...Option) {
	s := newSuite(newLocker, opts)
	t.Run("MutualExclusion", s.mutualExclusion)
	t.Run("SameLockerIsAnotherOwner", s.sameLockerIsAnotherOwner)
	t.Run("StaleReleaseRefused", s.staleReleaseRefused)
	t.Run("ExtendAfterLapseRefused", s.extendAfterLapseRefused)
	t.Run("ExtendOutlivesFirstTTL", s.extendOutlivesFirstTTL)
	t.Run("FencesStrictlyIncrease", s.fencesStrictlyIncrease)
	t.Run("CancelledWait", s.cancelledWait)
	t.Run("HundredGoroutinesOneWinner", s.hundredGoroutinesOneWinner)
	t.Run("HandleMisuse", s.handleMisuse)
	t.Run("BadInput", s.badInput)
	t.Run("DoExcludes", s.doExcludes)
	t.Run("DoSignalsLoss", s.doSignalsLoss)
	t.Run("DoReleasesOnPanic", s.doReleasesOnPanic)
	t.Run("AcquireAfterRelease", s.acquireAfterRelease)
	t.Run("LostHandleStaysLost", s.lostHandleStaysLost)
	t.Run("UnknownReleaseDoesNotRevive", s.unknownReleaseDoesNotRevive)
	t.Run("DoFollowsExtend", s.doFollowsExtend)
	t.Run("DoContextTruthfulAtExpiry", s.doContextTruthfulAtExpiry)
	t.Run("OneWayToWait", s.oneWayToWait)
	t.Run("Semaphore", s.semaphores)
}

func newSuite(newLocker func(t *testing.T) dlock.Locker, opts []Option) *suite {
	s := &suite{newLocker: newLocker}
	for _, o := range opts {
		o(s)
	}
	return s
}

// lapseLock makes the lock on key lapse and waits until the holder's
// validity is surely over.
func (s *suite) lapseLock(t *testing.T, key string, lock *dlock.Lock) {
	t.Helper()
	if s.lapse != nil {
		s.lapse(t, key)
	}
	time.Sleep(time.Until(lock.ValidUntil()) + 150*time.Millisecond)
}

func (s *suite) mutualExclusion(t *testing.T) {
	a, b := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	la := lockcheck.MustAcquire(t, a, key, 10*time.Second)
	_, err := b.TryAcquire(lockcheck.Ctx(t), key, 10*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	if err := la.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lb := lockcheck.MustAcquire(t, b, key, 10*time.Second)
	if lb.Token() == la.Token() {
		t.Fatalf("two grants share token %q", lb.Token())
	}
}

func (s *suite) sameLockerIsAnotherOwner(t *testing.T) {
	l := s.newLocker(t)
	key := lockcheck.Key(t)
	lockcheck.MustAcquire(t, l, key, 10*time.Second)
	_, err := l.TryAcquire(lockcheck.Ctx(t), key, 10*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
}

// The classic expiry bug: A is slower than its lock, B acquires, A releases.
// A must be told it no longer holds the lock, B must keep it, C is refused.
func (s *suite) staleReleaseRefused(t *testing.T) {
	a, b, c := s.newLocker(t), s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	la := lockcheck.MustAcquire(t, a, key, lockcheck.TTL)
	s.lapseLock(t, key, la)
	lb := lockcheck.MustAcquire(t, b, key, 10*time.Second)

	lockcheck.WantError(t, la.Release(lockcheck.Ctx(t)), dlock.ErrNotHeld)
	_, err := c.TryAcquire(lockcheck.Ctx(t), key, 10*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	if err := lb.Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("B lost its lock to A's stale release: Extend: %v", err)
	}
}

func (s *suite) extendAfterLapseRefused(t *testing.T) {
	a, b := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	la := lockcheck.MustAcquire(t, a, key, lockcheck.TTL)
	s.lapseLock(t, key, la)
	lb := lockcheck.MustAcquire(t, b, key, 10*time.Second)

	lockcheck.WantOneOf(t, la.Extend(lockcheck.Ctx(t), 10*time.Second), dlock.ErrNotHeld, dlock.ErrLockLost)
	if la.Held() {
		t.Fatal("handle reports held after a refused extension")
	}
	if err := lb.Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("the new holder's lock was disturbed: %v", err)
	}
}

func (s *suite) extendOutlivesFirstTTL(t *testing.T) {
	a, b := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	la := lockcheck.MustAcquire(t, a, key, lockcheck.TTL)
	if err := la.Extend(lockcheck.Ctx(t), 5*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	time.Sleep(lockcheck.TTL + 200*time.Millisecond)
	if !la.Held() {
		t.Fatal("extended lock not held past its first TTL")
	}
	_, err := b.TryAcquire(lockcheck.Ctx(t), key, time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
}

func (s *suite) fencesStrictlyIncrease(t *testing.T) {
	lockers := []dlock.Locker{s.newLocker(t), s.newLocker(t)}
	key := lockcheck.Key(t)
	var last uint64
	for i := range 20 {
		lock := lockcheck.MustAcquire(t, lockers[i%2], key, 10*time.Second)
		if lock.Fence() <= last {
			t.Fatalf("grant %d: fence %d not above the previous %d", i, lock.Fence(), last)
		}
		last = lock.Fence()
		if err := lock.Release(lockcheck.Ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func (s *suite) cancelledWait(t *testing.T) {
	a, b := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	lockcheck.MustAcquire(t, a, key, 10*time.Second)

	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := dlock.Acquire(c, b, key, 10*time.Second, dlock.WithRetryDelay(20*time.Millisecond))
	lockcheck.WantError(t, err, dlock.ErrNotAcquired, context.DeadlineExceeded)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a wait with a 200ms deadline took %v", d)
	}

	c2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel2)
	_, err = dlock.Acquire(c2, b, key, 10*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired, context.Canceled)

	_, err = dlock.Acquire(lockcheck.Ctx(t), b, key, 10*time.Second, dlock.WithRetryCount(2), dlock.WithRetryDelay(10*time.Millisecond))
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a spent retry budget reported as a context error: %v", err)
	}
}

func (s *suite) hundredGoroutinesOneWinner(t *testing.T) {
	lockers := make([]dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = s.newLocker(t)
	}
	key := lockcheck.Key(t)
	// Warm the lockers up first (connections, scripts, a backend's first-use
	// checks), so the race below is between contenders, not dial storms.
	for _, l := range lockers {
		lockcheck.MustAcquire(t, l, lockcheck.Key(t), 10*time.Second).Release(lockcheck.Ctx(t))
	}
	var wins, busy atomic.Int64
	var mu sync.Mutex
	var won []*dlock.Lock
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			<-start
			lock, err := lockers[i%len(lockers)].TryAcquire(lockcheck.Ctx(t), key, 10*time.Second)
			switch {
			case err == nil:
				wins.Add(1)
				mu.Lock()
				won = append(won, lock)
				mu.Unlock()
			case errors.Is(err, dlock.ErrNotAcquired):
				busy.Add(1)
			default:
				t.Errorf("TryAcquire: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, l := range won {
		l.Release(lockcheck.Ctx(t))
	}
	if wins.Load() != 1 || busy.Load() != 99 {
		t.Fatalf("100 contenders: %d winners, %d refused; want 1 and 99", wins.Load(), busy.Load())
	}
}

func (s *suite) handleMisuse(t *testing.T) {
	l := s.newLocker(t)
	key := lockcheck.Key(t)
	lock := lockcheck.MustAcquire(t, l, key, 10*time.Second)
	if err := lock.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lockcheck.WantError(t, lock.Release(lockcheck.Ctx(t)), dlock.ErrNotHeld)
	lockcheck.WantError(t, lock.Extend(lockcheck.Ctx(t), time.Second), dlock.ErrNotHeld)
	if lock.Held() {
		t.Fatal("released handle reports held")
	}
	// A released handle must not resurrect the key: another owner gets it.
	other := lockcheck.MustAcquire(t, s.newLocker(t), key, 10*time.Second)
	lockcheck.WantError(t, lock.Release(lockcheck.Ctx(t)), dlock.ErrNotHeld)
	if err := other.Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("the next owner was disturbed: %v", err)
	}
	lockcheck.WantError(t, other.Extend(lockcheck.Ctx(t), 0), dlock.ErrInvalid)
}

func (s *suite) badInput(t *testing.T) {
	l := s.newLocker(t)
	for _, tc := range []struct {
		name string
		key  string
		ttl  time.Duration
	}{
		{"empty key", "", time.Second},
		{"zero ttl", lockcheck.Key(t), 0},
		{"negative ttl", lockcheck.Key(t), -time.Second},
		{"sub-millisecond ttl", lockcheck.Key(t), time.Microsecond},
		{"huge ttl", lockcheck.Key(t), 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.TryAcquire(lockcheck.Ctx(t), tc.key, tc.ttl)
			lockcheck.WantError(t, err, dlock.ErrInvalid)
		})
	}
	t.Run("nil context", func(t *testing.T) {
		//lint:ignore SA1012 a nil context is the bad input under test
		_, err := l.TryAcquire(nil, lockcheck.Key(t), time.Second) //nolint:staticcheck
		lockcheck.WantError(t, err, dlock.ErrInvalid)
	})
	t.Run("Do with nil fn", func(t *testing.T) {
		lockcheck.WantError(t, dlock.Do(lockcheck.Ctx(t), l, lockcheck.Key(t), time.Second, nil), dlock.ErrInvalid)
	})
	t.Run("Do with threshold above ttl", func(t *testing.T) {
		err := dlock.Do(lockcheck.Ctx(t), l, lockcheck.Key(t), time.Second, func(context.Context) error { return nil }, dlock.WithExtendThreshold(2*time.Second))
		lockcheck.WantError(t, err, dlock.ErrInvalid)
	})
}

func (s *suite) doExcludes(t *testing.T) {
	key := lockcheck.Key(t)
	var inside, maxInside, runs atomic.Int64
	var wg sync.WaitGroup
	for range 5 {
		l := s.newLocker(t)
		wg.Go(func() {
			err := dlock.Do(lockcheck.Ctx(t), l, key, 5*time.Second, func(c context.Context) error {
				if lock := dlock.LockFromContext(c); lock == nil || lock.Key() != key || !lock.Held() || lock.Fence() == 0 {
					t.Errorf("LockFromContext in Do: %+v, want the held lock on %q with a fence", lock, key)
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				time.Sleep(30 * time.Millisecond)
				inside.Add(-1)
				runs.Add(1)
				return nil
			}, dlock.WithRetryDelay(5*time.Millisecond), dlock.WithRetryJitter(10*time.Millisecond))
			if err != nil {
				t.Errorf("Do: %v", err)
			}
		})
	}
	wg.Wait()
	if maxInside.Load() != 1 || runs.Load() != 5 {
		t.Fatalf("5 workers through Do: max inside %d, runs %d; want 1 and 5", maxInside.Load(), runs.Load())
	}
}

// Do must cancel its function's context with ErrLockLost within about one
// extension interval of the lock being taken away.
func (s *suite) doSignalsLoss(t *testing.T) {
	if s.lapse == nil {
		t.Skip("the backend gave no WithLapse hook")
	}
	l := s.newLocker(t)
	key := lockcheck.Key(t)
	var lostAfter time.Duration
	var cause error
	err := dlock.Do(lockcheck.Ctx(t), l, key, lockcheck.TTL, func(c context.Context) error {
		s.lapse(t, key)
		start := time.Now()
		select {
		case <-c.Done():
			lostAfter, cause = time.Since(start), context.Cause(c)
		case <-time.After(5 * lockcheck.TTL):
			t.Error("fn's context not cancelled within 5 TTLs of the lock lapsing")
		}
		return c.Err()
	})
	lockcheck.WantError(t, cause, dlock.ErrLockLost)
	lockcheck.WantError(t, err, dlock.ErrLockLost, context.Canceled)
	if lostAfter > lockcheck.TTL+200*time.Millisecond {
		t.Fatalf("loss signalled after %v, want within about one extension interval (ttl %v)", lostAfter, lockcheck.TTL)
	}
}

func (s *suite) doReleasesOnPanic(t *testing.T) {
	l := s.newLocker(t)
	key := lockcheck.Key(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the function's panic", r)
			}
		}()
		dlock.Do(lockcheck.Ctx(t), l, key, 10*time.Second, func(context.Context) error { panic("boom") })
	}()
	lockcheck.MustAcquire(t, s.newLocker(t), key, time.Second)
}

// dlock.Acquire and dlock.Do are the one way to wait, on every backend. A
// Locker with a waiting method of its own (Acquire, Do, AcquireMulti...)
// offers a second spelling that no finite test can prove to behave the
// same (a queue of its own, a fail-fast rule, defaults), and users then
// get one behaviour or the other by how they call it. A backend's own way
// of waiting belongs behind TryAcquire and driver.ReleaseNotifier, where
// dlock.Acquire reaches it.
func (s *suite) oneWayToWait(t *testing.T) {
	if err := ownWait(s.newLocker(t)); err != nil {
		t.Fatal(err)
	}
}

// ownWait returns an error naming l's waiting methods, if it has any: an
// exported method whose name begins with Acquire or Do and whose first
// parameter is a context.Context.
func ownWait(l dlock.Locker) error {
	typ := reflect.TypeOf(l)
	ctxType := reflect.TypeFor[context.Context]()
	var own []string
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		if !strings.HasPrefix(m.Name, "Acquire") && !strings.HasPrefix(m.Name, "Do") {
			continue
		}
		if m.Type.NumIn() > 1 && m.Type.In(1) == ctxType { // In(0) is the receiver
			own = append(own, m.Name)
		}
	}
	if len(own) > 0 {
		return fmt.Errorf("%v waits in its own methods %v beside dlock.Acquire and dlock.Do: two spellings that may differ; reach the backend's waiting through TryAcquire and driver.ReleaseNotifier instead", typ, own)
	}
	return nil
}

func (s *suite) acquireAfterRelease(t *testing.T) {
	a, b := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	la := lockcheck.MustAcquire(t, a, key, 10*time.Second)
	done := make(chan error, 1)
	go func() {
		lock, err := dlock.Acquire(lockcheck.Ctx(t), b, key, 10*time.Second, dlock.WithRetryDelay(20*time.Millisecond))
		if err == nil {
			err = lock.Release(lockcheck.Ctx(t))
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := la.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter did not get the lock within 5s of its release")
	}
}

// A handle whose lock lapsed stays lost, whatever a later Release says:
// one whose outcome is unknown (here: its context was already cancelled)
// must not make it held again, and the new owner's lock stays undisturbed.
func (s *suite) lostHandleStaysLost(t *testing.T) {
	if s.lapse == nil {
		t.Skip("the backend gave no WithLapse hook")
	}
	a, b := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	la := lockcheck.MustAcquire(t, a, key, 10*time.Second)
	s.lapse(t, key)
	lb := lockcheck.MustAcquire(t, b, key, 10*time.Second)
	lockcheck.WantOneOf(t, la.Extend(lockcheck.Ctx(t), 10*time.Second), dlock.ErrNotHeld, dlock.ErrLockLost)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := la.Release(cancelled); err != nil {
		lockcheck.WantOneOf(t, err, dlock.ErrNotHeld, dlock.ErrLockLost, dlock.ErrUnavailable)
	}
	if la.Held() || la.Remaining() != 0 {
		t.Fatalf("lost handle held again after a Release with a cancelled context (remaining %v)", la.Remaining())
	}
	lockcheck.WantOneOf(t, la.Extend(lockcheck.Ctx(t), 10*time.Second), dlock.ErrNotHeld, dlock.ErrLockLost)
	if err := la.Release(lockcheck.Ctx(t)); err != nil {
		lockcheck.WantOneOf(t, err, dlock.ErrNotHeld, dlock.ErrLockLost)
	}
	if err := lb.Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("the new owner's lock was disturbed: %v", err)
	}
}

// A Release whose outcome is unknown leaves the handle not held (Extend is
// refused), and a retried Release frees the key.
func (s *suite) unknownReleaseDoesNotRevive(t *testing.T) {
	l := s.newLocker(t)
	key := lockcheck.Key(t)
	lock := lockcheck.MustAcquire(t, l, key, 10*time.Second)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lock.Release(cancelled); err != nil {
		lockcheck.WantError(t, err, dlock.ErrUnavailable, context.Canceled)
		if lock.Held() {
			t.Fatal("handle held again after a Release whose outcome is unknown")
		}
		lockcheck.WantError(t, lock.Extend(lockcheck.Ctx(t), 10*time.Second), dlock.ErrNotHeld)
		// The first Release may have reached the server after all.
		if err := lock.Release(lockcheck.Ctx(t)); err != nil {
			lockcheck.WantError(t, err, dlock.ErrNotHeld)
		}
	}
	lockcheck.WantError(t, lock.Release(lockcheck.Ctx(t)), dlock.ErrNotHeld)
	lockcheck.MustAcquire(t, s.newLocker(t), key, time.Second)
}

// When the function shortens its lease, Do follows: while the function's
// context is alive nobody else can take the lock, past the short TTL too.
func (s *suite) doFollowsExtend(t *testing.T) {
	l, other := s.newLocker(t), s.newLocker(t)
	key := lockcheck.Key(t)
	err := dlock.Do(lockcheck.Ctx(t), l, key, 10*time.Second, func(c context.Context) error {
		if err := dlock.LockFromContext(c).Extend(c, lockcheck.TTL); err != nil {
			return err
		}
		for end := time.Now().Add(3 * lockcheck.TTL); time.Now().Before(end); time.Sleep(lockcheck.TTL / 10) {
			lock, err := other.TryAcquire(lockcheck.Ctx(t), key, 10*time.Second)
			if err == nil {
				alive := c.Err() == nil
				lock.Release(lockcheck.Ctx(t))
				if alive {
					return fmt.Errorf("another owner acquired %q while the function's context was alive", key)
				}
				return nil
			}
			lockcheck.WantError(t, err, dlock.ErrNotAcquired)
		}
		return context.Cause(c)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

// The function's context never reports the lock held past its validity:
// a function that spins checking it sees the loss on its first look after
// ValidUntil, not when Do's goroutine gets to run.
func (s *suite) doContextTruthfulAtExpiry(t *testing.T) {
	l := s.newLocker(t)
	var late time.Duration
	err := dlock.Do(lockcheck.Ctx(t), l, lockcheck.Key(t), lockcheck.TTL, func(c context.Context) error {
		until := dlock.LockFromContext(c).ValidUntil()
		for {
			now := time.Now()
			if c.Err() != nil {
				return nil
			}
			if !now.Before(until) {
				late = now.Sub(until)
				return nil
			}
		}
	}, dlock.WithMaxHold(lockcheck.TTL)) // no extension: the validity runs out
	if late > 0 {
		t.Fatalf("context alive %v after the validity ran out", late)
	}
	lockcheck.WantError(t, err, dlock.ErrLockLost)
}

// A waiting Acquire rides out an outage shorter than its context; one that
// outlasts it ends with the context's error and one sentinel: ErrUnavailable
// after an attempt that found the backend unreachable, ErrNotAcquired when
// the only attempt was cut short by the context (a client that retries its
// dials can spend the whole context in one attempt).
func (s *suite) acquireWaitsThroughOutage(t *testing.T) {
	l := s.newLocker(t)
	key := lockcheck.Key(t)
	lockcheck.MustAcquire(t, l, lockcheck.Key(t), 10*time.Second).Release(lockcheck.Ctx(t)) // connected and warmed up

	stop, once := s.outage(t), sync.Once{}
	end := func() { once.Do(stop) }
	t.Cleanup(end)
	c, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := dlock.Acquire(c, l, key, 10*time.Second)
	lockcheck.WantOneOf(t, err, dlock.ErrUnavailable, dlock.ErrNotAcquired)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait that ended with its context during an outage: %v, want it to match context.DeadlineExceeded", err)
	}

	time.AfterFunc(300*time.Millisecond, end)
	lock, err := dlock.Acquire(lockcheck.Ctx(t), l, key, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire through a 300ms outage: %v", err)
	}
	lock.Release(lockcheck.Ctx(t))
}

// RunOutage runs the suite's test of a wait through an outage: outage makes
// the backend unreachable for every Locker, with connections refused (kill
// the server, or a majority of them), and the function it returns ends the
// outage and is called once. It has its own entry point because an outage
// needs servers of its own rather than the ones the rest of the suite
// shares. newLocker is as for Run.
func RunOutage(t *testing.T, newLocker func(t *testing.T) dlock.Locker, outage func(t *testing.T) (end func())) {
	s := &suite{newLocker: newLocker, outage: outage}
	t.Run("AcquireWaitsThroughOutage", s.acquireWaitsThroughOutage)
	t.Run("OneWayToWait", s.oneWayToWait)
}
