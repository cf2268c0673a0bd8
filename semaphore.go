package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// semaphores is driver.Semaphores.
type semaphores interface {
	Semaphore(limit int) Locker
	SetLimit(ctx context.Context, name string, limit int) error
}

// Semaphore returns a Locker whose TryAcquire(ctx, name, ttl) grants one of
// limit permits of name: a lock on one of its slots, {name}#0 to
// {name}#(limit-1), whichever is free (the braces are a Redis Cluster hash
// tag, which puts every slot of a name in one Cluster slot; a name with a
// tag keeps its own: "{tenant:7}:exports#2", and names that differ only by
// such braces, "a" and "{a}", name one semaphore). Wait for a permit and
// hold it with Acquire and Do, like any lock:
//
//	err := dlock.Do(ctx, dlock.Semaphore(locker, 5), "vendor-api", ttl, fn)
//
// The permit's Slot says which slot it holds, and its Key is the slot's
// ("{vendor-api}#3", say). Its TryAcquire returns an error matching
// ErrNotAcquired when every permit is held, and ErrInvalid for a limit
// below 1 or above 1000, for an empty name, and when the servers recorded
// another limit for name. l's events report the attempts on name and the
// permit's life on its slot's key.
//
// When l has semaphores of its own (driver.Semaphores: every backend of
// this repository), Semaphore returns them. Otherwise the permits are l's
// locks on the slots' keys, tried in order, one request each (in l's
// events, an attempt on each slot's key, not on name); no limit is
// recorded then, so Lockers that disagree on it are not told, and a
// release of any slot wakes Acquire when l announces releases
// (driver.ReleaseNotifier).
func Semaphore(l Locker, limit int) Locker {
	if s, ok := l.(semaphores); ok {
		return s.Semaphore(limit)
	}
	return semaphore{l, limit}
}

// SetLimit makes limit the limit of name's semaphore on l's servers (l is
// the backend's Locker, not a semaphore's): Lockers that ask with another
// limit get ErrInvalid from then on. Shrinking lets holders keep their
// permits until they release or lose them, and grants none while limit or
// more are held; growing admits new holders at once. The servers keep a
// limit only while a permit of name may be held: with none held, SetLimit
// does nothing, and the next grant records its own Locker's limit. It
// returns an error matching ErrUnavailable when the servers could not be
// reached, and ErrInvalid for bad arguments and for a Locker whose
// semaphores keep no limit (see Semaphore).
func SetLimit(ctx context.Context, l Locker, name string, limit int) error {
	if err := checkCall(ctx, l, "", ""); err != nil {
		return err
	}
	s, ok := l.(semaphores)
	if !ok {
		return bridge.Invalidf("%T keeps no semaphore limits on its servers", l)
	}
	return s.SetLimit(ctx, name, limit)
}

// semaphore is Semaphore's for a Locker without semaphores of its own.
type semaphore struct {
	l     Locker
	limit int
}

func (s semaphore) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	if err := checkCall(ctx, s.l, "semaphore", name); err != nil {
		return nil, err
	}
	if err := bridge.CheckLimit(s.limit); err != nil {
		return nil, err
	}
	for slot := range s.limit {
		lock, err := s.l.TryAcquire(ctx, bridge.SlotKey(name, slot), ttl)
		if err == nil {
			lock.slot = slot
			return lock, nil
		}
		var final *bridge.Final
		if !errors.Is(err, ErrNotAcquired) || errors.As(err, &final) || ctx.Err() != nil {
			return nil, err // unreachable, invalid, or cut short: the next slot would be too
		}
	}
	return nil, fmt.Errorf("dlock: acquire %q: %w (all %d permits are held)", name, ErrNotAcquired, s.limit)
}

// NotifyRelease announces a release of any slot of name that the Locker's
// own NotifyRelease announces.
func (s semaphore) NotifyRelease(ctx context.Context, name string) (<-chan struct{}, func()) {
	n, ok := s.l.(releaseNotifier)
	if !ok || bridge.CheckLimit(s.limit) != nil {
		return nil, func() {}
	}
	out, done := make(chan struct{}, 1), make(chan struct{})
	stops := make([]func(), s.limit)
	var wg sync.WaitGroup
	announced := false
	for slot := range s.limit {
		var released <-chan struct{}
		released, stops[slot] = n.NotifyRelease(ctx, bridge.SlotKey(name, slot))
		if released == nil {
			continue
		}
		announced = true
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case _, ok := <-released:
					if !ok {
						return
					}
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	stop := func() {
		close(done)
		wg.Wait()
		for _, stop := range stops {
			stop()
		}
	}
	if !announced { // none will be: the wait polls
		stop()
		return nil, func() {}
	}
	return out, stop
}
