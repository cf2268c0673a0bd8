package dlocktest

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Hold makes key busy: another owner takes it for ttl, on the Locker's
// clock (Advance moves it), as another process would, and keeps it until
// then or until its handle, returned, is released (which wakes the
// waiters). It is not one of the Locker's attempts: it is neither
// observed nor failed by the faults the test injected (the handle's
// Extend and Release are requests like any other). It returns an error
// matching dlock.ErrNotAcquired when key is held already, and
// dlock.ErrInvalid for an empty key or a ttl no backend accepts.
func (l *Locker) Hold(key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := driver.Check(context.Background(), key, ttl); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lock, err := l.grantLocked(key, ttl, "")
	if err != nil {
		return nil, fmt.Errorf("dlocktest: hold %q: %w", key, err)
	}
	return lock, nil
}

// WaitHeld waits until someone holds key (the code under test, through
// TryAcquire, dlock.Acquire or dlock.Do, or Hold) and returns the
// holder's handle, so that a test knows when the code it runs holds the
// lock. It returns an error matching ctx's error when ctx ends first.
func (l *Locker) WaitHeld(ctx context.Context, key string) (*dlock.Lock, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	for {
		l.mu.Lock()
		e := l.liveLocked(key, l.Now())
		if l.granted == nil {
			l.granted = make(chan struct{})
		}
		granted := l.granted
		l.mu.Unlock()
		if e != nil {
			return e.lock, nil
		}
		select {
		case <-granted:
		case <-ctx.Done():
			return nil, fmt.Errorf("dlocktest: waiting for %q to be held: %w", key, ctx.Err())
		}
	}
}

// Lose takes the lock on key away now, as when its server lost it: its
// holder's handle is declared lost (Held reports false, Extend returns an
// error matching dlock.ErrLockLost, and the context of the dlock.Do
// holding it ends with that cause; dlock.Event's Detected is "session
// gone"), and then the key is free for others (its waiters are woken). It
// reports whether key was held.
func (l *Locker) Lose(key string) bool {
	l.mu.Lock()
	e := l.liveLocked(key, l.Now())
	l.mu.Unlock()
	if e == nil {
		return false
	}
	// The holder learns it first, so that no one else holds the key while
	// the handle still reports it held.
	driver.Lost(e.lock, fmt.Errorf("dlock: %w: the lock on %q was taken away (dlocktest.Locker.Lose)", dlock.ErrLockLost, key))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys[key] == e {
		delete(l.keys, key)
		l.wakeLocked(key)
	}
	return true
}

// FailNext makes the next n requests fail with err, wrapped in a
// *dlock.NodeError whose Node is "dlocktest": TryAcquire's attempts, and the
// Extend and Release of its locks, in the order they come. A nil err is
// dlock.ErrUnavailable (the backend could not be reached); any error
// matching one of dlock's sentinels can stand for the server's reason. It
// replaces what an earlier FailNext had left; n <= 0 cancels it.
func (l *Locker) FailNext(n int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLeft, l.failErr = max(n, 0), orUnavailable(err)
}

// Fail makes every request fail with err (see FailNext) until Heal: an
// outage. Requests already applied are not undone: a lock held stays held
// on the server until its TTL runs out, while its extensions fail.
func (l *Locker) Fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = orUnavailable(err)
}

// Heal ends what Fail and FailNext started: requests succeed again.
func (l *Locker) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down, l.failLeft, l.failErr = nil, 0, nil
}

func orUnavailable(err error) error {
	if err == nil {
		return dlock.ErrUnavailable
	}
	return err
}

// Now returns the Locker's clock: the machine's time, plus what Advance
// added. Code under test that names keys after the time (a tick) can
// share it.
func (l *Locker) Now() time.Time { return time.Now().Add(time.Duration(l.offset.Load())) }

// Advance moves the Locker's clock d forward at once, as if the process
// had been paused for d (the clock never goes back: d <= 0 does nothing).
// The keys whose TTL ran out are free (their waiters are woken); the
// handles whose validity ran out are lost (Held false, Extend refused, the
// context of the dlock.Do holding one ends with cause dlock.ErrLockLost,
// detected as "validity ran out"); and a dlock.Do whose lock has less
// validity left than its extension threshold extends it at once, in the
// background.
func (l *Locker) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	l.mu.Lock()
	l.offset.Add(int64(d))
	now := l.Now()
	locks := make([]*dlock.Lock, 0, len(l.keys))
	for key, e := range l.keys {
		locks = append(locks, e.lock)
		if !e.expires.After(now) {
			delete(l.keys, key)
			l.wakeLocked(key)
		}
	}
	l.mu.Unlock()
	for _, lock := range locks {
		driver.Recheck(lock)
	}
}
