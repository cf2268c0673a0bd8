package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// semaphores runs the semaphore checks (dlock.Semaphore) as subtests: any
// Locker passes them, through its own semaphores (driver.Semaphores) or
// dlock's generic ones.
func (s *suite) semaphores(t *testing.T) {
	t.Run("AtMostN", s.semAtMostN)
	t.Run("ReleaseReturnsPermit", s.semReleaseReturnsPermit)
	t.Run("LapseReturnsPermit", s.semLapseReturnsPermit)
	t.Run("ConcurrentAtMostN", s.semConcurrentAtMostN)
	t.Run("ReleaseWakesWaiter", s.semReleaseWakesWaiter)
	t.Run("LimitAgreed", s.semLimitAgreed)
	t.Run("ShrinkLetsHoldersFinish", s.semShrinkLetsHoldersFinish)
	t.Run("BadInput", s.semBadInput)
}

// mustPermit takes a permit of name from a semaphore of limit over l.
func mustPermit(t *testing.T, l dlock.Locker, limit int, name string, ttl time.Duration) *dlock.Lock {
	t.Helper()
	lock := lockcheck.MustAcquire(t, dlock.Semaphore(l, limit), name, ttl)
	if slot := lock.Slot(); slot < 0 || slot >= limit {
		t.Fatalf("permit on slot %d of a semaphore of %d", slot, limit)
	}
	if want := bridge.SlotKey(name, lock.Slot()); lock.Key() != want {
		t.Fatalf("permit's key %q, want %q", lock.Key(), want)
	}
	return lock
}

// fillSemaphore takes every permit of a semaphore of limit on name, each
// with a Locker of its own, and returns them, in slot order.
func (s *suite) fillSemaphore(t *testing.T, limit int, name string, ttl time.Duration) []*dlock.Lock {
	t.Helper()
	held := make([]*dlock.Lock, limit)
	for range limit {
		lock := mustPermit(t, s.newLocker(t), limit, name, ttl)
		if held[lock.Slot()] != nil {
			t.Fatalf("slot %d granted twice", lock.Slot())
		}
		held[lock.Slot()] = lock
	}
	return held
}

// wantFull fails unless a fresh attempt on a semaphore of limit over l
// finds every permit held.
func wantFull(t *testing.T, l dlock.Locker, limit int, name string) {
	t.Helper()
	lock, err := dlock.Semaphore(l, limit).TryAcquire(lockcheck.Ctx(t), name, 10*time.Second)
	if err == nil {
		lock.Release(lockcheck.Ctx(t))
		t.Fatalf("permit granted on slot %d of %q beyond the limit of %d", lock.Slot(), name, limit)
	}
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
}

// A semaphore of N grants N permits on N distinct slots, and refuses the
// next, also to a Locker that holds one; a refused or cancelled attempt
// leaves nothing behind.
func (s *suite) semAtMostN(t *testing.T) {
	const n = 3
	name := lockcheck.Key(t)
	held := s.fillSemaphore(t, n, name, 10*time.Second)
	wantFull(t, s.newLocker(t), n, name)
	wantFull(t, s.newLocker(t), n, name)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if lock, err := dlock.Semaphore(s.newLocker(t), n).TryAcquire(cancelled, name, 10*time.Second); err == nil {
		lock.Release(lockcheck.Ctx(t))
		t.Fatalf("an attempt on a full semaphore was granted slot %d", lock.Slot())
	}
	for _, lock := range held {
		if err := lock.Release(lockcheck.Ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	s.fillSemaphore(t, n, name, 10*time.Second) // no attempt left a permit behind
	wantFull(t, s.newLocker(t), n, name)
}

// A released permit goes to the next holder, on the same slot with a
// higher fence; successive holders of a slot get increasing fences.
func (s *suite) semReleaseReturnsPermit(t *testing.T) {
	const n = 2
	name := lockcheck.Key(t)
	held := s.fillSemaphore(t, n, name, 10*time.Second)
	last := held[1]
	for i := range 6 {
		if err := last.Release(lockcheck.Ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		next := mustPermit(t, s.newLocker(t), n, name, 10*time.Second)
		if next.Slot() != 1 {
			t.Fatalf("round %d: the free slot was 1, the permit took %d", i, next.Slot())
		}
		if next.Fence() <= last.Fence() {
			t.Fatalf("round %d: slot 1's fence went from %d to %d", i, last.Fence(), next.Fence())
		}
		last = next
	}
	if err := held[0].Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("the other slot's holder was disturbed: %v", err)
	}
}

// A permit whose holder stops (killed, paused) comes back when its lease
// lapses; the stale holder can neither extend nor release the next one's,
// and a fence guard keyed by the permit's key refuses its late write while
// the holders of other slots write on.
func (s *suite) semLapseReturnsPermit(t *testing.T) {
	const n = 2
	name := lockcheck.Key(t)
	stale := mustPermit(t, s.newLocker(t), n, name, lockcheck.TTL)
	other := mustPermit(t, s.newLocker(t), n, name, 10*time.Second)
	s.lapseLock(t, stale.Key(), stale)
	next := mustPermit(t, s.newLocker(t), n, name, 10*time.Second)
	if next.Slot() != stale.Slot() {
		t.Fatalf("the lapsed permit was on slot %d, the next one took %d", stale.Slot(), next.Slot())
	}

	guard := fence.NewMemory()
	write := func(lock *dlock.Lock) error {
		return guard.Write(lock.Key(), lock.Fence(), lock.Token(), func() error { return nil })
	}
	for _, lock := range []*dlock.Lock{next, other} {
		if err := write(lock); err != nil {
			t.Fatalf("a holder's write on slot %d: %v", lock.Slot(), err)
		}
	}
	if err := write(stale); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the stale holder's write after its slot was granted again: %v, want fence.ErrStale", err)
	}
	if err := write(other); err != nil {
		t.Fatalf("the other slot's holder after the stale write: %v", err)
	}

	lockcheck.WantOneOf(t, stale.Extend(lockcheck.Ctx(t), 10*time.Second), dlock.ErrNotHeld, dlock.ErrLockLost)
	lockcheck.WantError(t, stale.Release(lockcheck.Ctx(t)), dlock.ErrNotHeld)
	if err := next.Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
		t.Fatalf("the new holder was disturbed by the stale one: %v", err)
	}
	wantFull(t, s.newLocker(t), n, name)
}

// Contenders over several Lockers, each taking the semaphore with Do
// several times: never more than N inside at once, and all get in.
func (s *suite) semConcurrentAtMostN(t *testing.T) {
	const n, contenders, rounds = 3, 12, 3
	name := lockcheck.Key(t)
	lockers := make([]dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = dlock.Semaphore(s.newLocker(t), n)
	}
	var inside, most, runs atomic.Int64
	var wg sync.WaitGroup
	for i := range contenders {
		wg.Go(func() {
			for range rounds {
				err := dlock.Do(lockcheck.Ctx(t), lockers[i%len(lockers)], name, 10*time.Second, func(context.Context) error {
					now := inside.Add(1)
					defer inside.Add(-1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					runs.Add(1)
					time.Sleep(2 * time.Millisecond)
					return nil
				}, dlock.WithRetryDelay(5*time.Millisecond), dlock.WithRetryJitter(5*time.Millisecond))
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > n {
		t.Fatalf("%d holders inside a semaphore of %d at once", most.Load(), n)
	}
	if runs.Load() != contenders*rounds {
		t.Fatalf("%d runs, want %d", runs.Load(), contenders*rounds)
	}
}

// A Locker that announces releases (driver.ReleaseNotifier) wakes a
// semaphore's waiter when any permit is released, long before its next
// poll.
func (s *suite) semReleaseWakesWaiter(t *testing.T) {
	base := s.newLocker(t)
	const n = 2
	name := lockcheck.Key(t)
	if rn, ok := dlock.Semaphore(base, n).(driver.ReleaseNotifier); !ok || !announces(rn, name) {
		t.Skip("the Locker announces no releases: its waiters poll")
	}
	held := s.fillSemaphore(t, n, name, 10*time.Second)
	done := make(chan error, 1)
	go func() {
		lock, err := dlock.Acquire(lockcheck.Ctx(t), dlock.Semaphore(base, n), name, 10*time.Second,
			dlock.WithRetryDelay(time.Minute), dlock.WithRetryJitter(0))
		if err == nil {
			err = lock.Release(lockcheck.Ctx(t))
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // let it fail once and wait (or not: then it simply wins)
	released := time.Now()
	if err := held[1].Release(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the released permit within 10s; its poll was a minute away")
	}
	t.Logf("the waiter had the permit %v after the release", time.Since(released))
}

// announces reports whether n announces the releases of key: a nil
// channel says it does not.
func announces(n driver.ReleaseNotifier, key string) bool {
	released, stop := n.NotifyRelease(context.Background(), key)
	stop()
	return released != nil
}

// The first grant records the limit; a Locker that asks with another one
// is refused with ErrInvalid, at once also when it waits, until SetLimit
// changes the record. A Locker with generic semaphores keeps no record:
// SetLimit says so.
func (s *suite) semLimitAgreed(t *testing.T) {
	a, b := s.newLocker(t), s.newLocker(t)
	name := lockcheck.Key(t)
	if _, ok := a.(driver.Semaphores); !ok {
		lockcheck.WantError(t, dlock.SetLimit(lockcheck.Ctx(t), a, name, 3), dlock.ErrInvalid)
		t.Skip("the Locker has no semaphores of its own: no limit is recorded")
	}
	mustPermit(t, a, 2, name, 10*time.Second)
	conflict := func(l dlock.Locker, limit, server int) {
		t.Helper()
		_, err := dlock.Semaphore(l, limit).TryAcquire(lockcheck.Ctx(t), name, 10*time.Second)
		lockcheck.WantError(t, err, dlock.ErrInvalid)
		if want := fmt.Sprintf("limit conflict: the server has %d, this Locker %d", server, limit); !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
		start := time.Now()
		_, err = dlock.Acquire(lockcheck.Ctx(t), dlock.Semaphore(l, limit), name, 10*time.Second)
		lockcheck.WantError(t, err, dlock.ErrInvalid)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a wait with a conflicting limit took %v to give up", d)
		}
	}
	conflict(b, 3, 2)
	if err := dlock.SetLimit(lockcheck.Ctx(t), b, name, 3); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	mustPermit(t, b, 3, name, 10*time.Second)
	mustPermit(t, s.newLocker(t), 3, name, 10*time.Second)
	conflict(a, 2, 3)
	wantFull(t, s.newLocker(t), 3, name)
}

// Shrinking the limit lets the holders finish: they keep their permits,
// and no new permit is granted until fewer than the new limit are held.
// Growing it admits new holders at once.
func (s *suite) semShrinkLetsHoldersFinish(t *testing.T) {
	l := s.newLocker(t)
	if _, ok := l.(driver.Semaphores); !ok {
		t.Skip("the Locker has no semaphores of its own: no limit is recorded")
	}
	name := lockcheck.Key(t)
	held := s.fillSemaphore(t, 3, name, 10*time.Second)
	if err := dlock.SetLimit(lockcheck.Ctx(t), l, name, 1); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	for _, lock := range held {
		if err := lock.Extend(lockcheck.Ctx(t), 10*time.Second); err != nil {
			t.Fatalf("a holder on slot %d lost its permit to the smaller limit: %v", lock.Slot(), err)
		}
	}
	for _, lock := range held {
		wantFull(t, l, 1, name)
		if err := lock.Release(lockcheck.Ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	first := mustPermit(t, l, 1, name, 10*time.Second)
	wantFull(t, s.newLocker(t), 1, name)
	if err := dlock.SetLimit(lockcheck.Ctx(t), l, name, 2); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	if second := mustPermit(t, s.newLocker(t), 2, name, 10*time.Second); second.Slot() == first.Slot() {
		t.Fatalf("two permits on slot %d", first.Slot())
	}
	wantFull(t, s.newLocker(t), 2, name)
}

func (s *suite) semBadInput(t *testing.T) {
	l := s.newLocker(t)
	for _, tc := range []struct {
		name  string
		limit int
		key   string
		ttl   time.Duration
	}{
		{"zero limit", 0, lockcheck.Key(t), time.Second},
		{"negative limit", -1, lockcheck.Key(t), time.Second},
		{"limit above MaxLimit", bridge.MaxLimit + 1, lockcheck.Key(t), time.Second},
		{"empty name", 2, "", time.Second},
		{"zero ttl", 2, lockcheck.Key(t), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dlock.Semaphore(l, tc.limit).TryAcquire(lockcheck.Ctx(t), tc.key, tc.ttl)
			lockcheck.WantError(t, err, dlock.ErrInvalid)
		})
	}
	t.Run("nil context", func(t *testing.T) {
		//lint:ignore SA1012 a nil context is the bad input under test
		_, err := dlock.Semaphore(l, 2).TryAcquire(nil, lockcheck.Key(t), time.Second) //nolint:staticcheck
		lockcheck.WantError(t, err, dlock.ErrInvalid)
	})
	t.Run("SetLimit", func(t *testing.T) {
		lockcheck.WantError(t, dlock.SetLimit(lockcheck.Ctx(t), l, lockcheck.Key(t), 0), dlock.ErrInvalid)
		lockcheck.WantError(t, dlock.SetLimit(lockcheck.Ctx(t), l, "", 2), dlock.ErrInvalid)
		lockcheck.WantError(t, dlock.SetLimit(lockcheck.Ctx(t), nil, lockcheck.Key(t), 2), dlock.ErrInvalid)
	})
}
