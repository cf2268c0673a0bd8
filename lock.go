package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Locker is what every backend implements: one attempt to take a lock.
//
// TryAcquire makes a single attempt. It returns a held *Lock, or an error
// matching ErrNotAcquired when another owner holds key, ErrUnavailable when
// the backend could not be reached, or ErrInvalid for bad arguments (an
// empty key, a ttl under a millisecond or over 30 days). It never returns a
// lock whose validity is already spent.
type Locker interface {
	TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error)
}

// grant is driver.Grant.
type grant interface {
	Extend(ctx context.Context, ttl time.Duration) (validUntil time.Time, err error)
	Release(ctx context.Context) error
}

// A Lock's state; nothing leads back to held.
//
//	held -> lost               refused extension, spent validity, session gone
//	held, lost -> releasing    Release was called (again while its outcome is unknown)
//	releasing -> released      the server answered
type lockState uint8

const (
	stateHeld lockState = iota
	stateLost
	stateReleasing
	stateReleased
)

// Lock is a held lock: its key, the random token that proves ownership, the
// fencing token, and the validity deadline after which the holder must
// assume the lock is gone. Its methods are safe for concurrent use. Extend
// and Release reach the backend one at a time: a call waits, within its
// context, for the one in flight on the same handle, so that the validity
// recorded is always the one the server applied last.
//
// A Lock is never revived: once Release was called or the lock was lost,
// Held reports false and Extend returns an error, whatever a late server
// reply or a failed Release says.
type Lock struct {
	key   string
	slot  int // a semaphore's permit: its slot; a lock: -1
	token string
	fence uint64
	grant grant
	now   func() time.Time

	grantedAt time.Time
	nodes     int // how many of the backend's nodes granted the lock

	mu         sync.Mutex
	turn       bool // a call into grant is in flight: replies are recorded in order
	state      lockState
	validUntil time.Time
	lostCause  error  // kept once releasing
	lostHow    string // how the loss was detected (Event.Detected)
	// changed, made by a waiter (Do, a call waiting for the turn), is
	// closed at the next change of state, validUntil or turn.
	changed chan struct{}
	// pending are the events not delivered yet; buf holds the first
	// without an allocation.
	pending    []queued
	buf        [1]queued
	delivering bool
	backend    string                       // set by driver.Events
	observe    func(context.Context, Event) // nil: no observers
}

func init() {
	bridge.NewLock = func(key string, slot int, token string, fence uint64, validUntil time.Time, g any) any {
		l := &Lock{key: key, slot: slot, token: token, fence: fence, grant: g.(grant), now: time.Now,
			nodes: 1, validUntil: validUntil}
		if n, ok := g.(interface{ Nodes() int }); ok {
			l.nodes = n.Nodes()
		}
		if c, ok := g.(interface{ Now() time.Time }); ok {
			l.now = c.Now
		}
		l.grantedAt = l.now()
		return l
	}
	bridge.Lose = func(lock any, cause error) { lock.(*Lock).lose(cause, lostSession) }
	bridge.Recheck = func(lock any) { lock.(*Lock).recheck() }
}

// Key returns the locked key, as the caller named it (without any prefix a
// backend adds). A semaphore's permit is a lock on one of its slots, and
// its key is the slot's, such as "{vendor-api}#2" (see Semaphore).
func (l *Lock) Key() string { return l.key }

// Slot returns the slot that a semaphore's permit holds, from 0 to the
// limit - 1, and -1 for a lock that is not a permit (see Semaphore).
func (l *Lock) Slot() int { return l.slot }

// Token returns the random value that identifies this holder on the server.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token of this grant: a number greater than the
// fence of every earlier grant of the same key. Pass it to the protected
// resource (see package fence) so it can reject writes from stale holders.
func (l *Lock) Fence() uint64 { return l.fence }

// ValidUntil returns the moment (on the monotonic clock) until which the lock
// is known to be held, assuming clocks tick at about the same rate: the send
// time of the last acquire or extend that succeeded, plus its TTL, minus the
// drift margin. After it the key may have expired and another owner may
// hold it. It is meaningful only while Held reports true; afterwards it
// keeps the last value.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Remaining returns the time left until ValidUntil, or 0 when the lock is no
// longer held.
func (l *Lock) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return 0
	}
	return max(l.validUntil.Sub(l.now()), 0)
}

// Held reports whether the lock is believed held: neither lost nor (being)
// released, and within its validity. It asks no server.
func (l *Lock) Held() bool { return l.Remaining() > 0 }

// Extend resets the lock's TTL to ttl (whole milliseconds, rounded up) if it
// is still held, and moves ValidUntil accordingly, earlier too when ttl is
// shorter than what was left. It returns:
//
//   - an error matching ErrNotHeld when the server no longer has the lock
//     (the handle is lost from then on), or when Release was called;
//   - ErrLockLost when the handle was declared lost (its validity ran out,
//     also while the extension was in flight, or Do declared it), or the
//     backend reported the lock's session gone;
//   - ErrUnavailable when the outcome is unknown (the backend could not be
//     reached, ctx ended): the lock may still be held, so retry before
//     ValidUntil. The request may have reached the server, so a ttl
//     shorter than the validity left lowers ValidUntil to what it could
//     have set;
//   - ErrMisconfigured when the backend refused the request for a reason
//     retrying cannot change (a password or permission changed while the
//     lock was held, say): the lock stays held until ValidUntil;
//   - ErrInvalid for a bad ttl.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := bridge.CheckTTL(ttl); err != nil {
		return &opError{"extend", l.key, err}
	}
	defer l.deliver() // the events, once the turn is given back
	if err := l.takeTurn(ctx, "extend", func() error { return l.goneLocked("extend") }); err != nil {
		return err
	}
	defer l.endTurn()
	start := l.now()
	until, err := l.grant.Extend(ctx, ttl)

	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.goneLocked("extend"); err != nil {
		return err // lost or released while the request was in flight: stay so
	}
	if err != nil {
		err = &opError{"extend", l.key, known(err)}
		l.recordLocked(ctx, Event{Kind: EventExtendFailed, Err: err, Took: l.now().Sub(start)})
		if errors.Is(err, ErrNotHeld) {
			l.loseLocked(err, lostRefused)
		} else if errors.Is(err, ErrLockLost) {
			l.loseLocked(err, lostSession)
		} else if bound := bridge.ValidUntil(start, ttl, bridge.DefaultDriftFactor); bound.Before(l.validUntil) {
			l.setValidLocked(bound)
		}
		return err
	}
	if !until.After(l.now()) {
		// Too late: someone may have taken the lock in between, so a
		// successful reply cannot make this handle valid again.
		l.loseLocked(fmt.Errorf("dlock: %w: validity of %q ran out while extending", ErrLockLost, l.key), lostExpired)
		return l.lostCause
	}
	l.setValidLocked(until)
	l.recordLocked(ctx, Event{Kind: EventExtended, Took: l.now().Sub(start)})
	return nil
}

// Release deletes the lock if this holder still owns it, and never touches
// another owner's lock. From the call on, the handle is not held. It returns
// nil when it deleted the lock, and:
//
//   - an error matching ErrNotHeld when the lock was released before, or
//     the server no longer held it (it expired or was taken over);
//   - ErrLockLost when the backend reported the lock's session gone (and
//     the lock with it);
//   - ErrUnavailable when the outcome is unknown (the backend could not be
//     reached, ctx ended): the lock may still be on the server, until its
//     TTL ends. Release may be called again; the handle is not held
//     again either way;
//   - ErrMisconfigured when the backend refused the request (see Extend):
//     the lock stays on the server until its TTL ends.
//
// Release asks the server even when the handle was lost or its validity ran
// out, so that a key that is still there does not block others until its
// TTL ends.
func (l *Lock) Release(ctx context.Context) error {
	defer l.deliver() // the events, once the turn is given back
	err := l.takeTurn(ctx, "release", func() error {
		if l.state == stateReleased { // also by a Release that had the turn before
			return &opError{"release", l.key, fmt.Errorf("%w (already released)", ErrNotHeld)}
		}
		if l.state != stateReleasing {
			l.setStateLocked(stateReleasing)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer l.endTurn()

	start := l.now()
	err = l.grant.Release(ctx)

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		err = &opError{"release", l.key, known(err)}
	}
	l.recordLocked(ctx, Event{Kind: EventReleased, Err: err, Took: l.now().Sub(start)})
	if errors.Is(err, ErrLockLost) && l.lostCause == nil {
		l.lostCause = err
	}
	if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		l.setStateLocked(stateReleased) // the server answered: nothing to retry
	}
	return err
}

// takeTurn waits for the turn, until ctx ends (nothing was sent then) or
// check, called under l.mu before each wait, refuses the call.
func (l *Lock) takeTurn(ctx context.Context, op string, check func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if err := check(); err != nil {
			return err
		}
		if !l.turn {
			l.turn = true
			return nil
		}
		changed := l.changedLocked()
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			l.mu.Lock()
			return &opError{op, l.key, fmt.Errorf("%w: waiting for the handle's call in flight: %w", ErrUnavailable, ctxErr(ctx))}
		}
		l.mu.Lock()
	}
}

func (l *Lock) endTurn() {
	l.mu.Lock()
	l.turn = false
	l.notifyLocked()
	l.mu.Unlock()
}

// known makes a grant's error that matches no sentinel (a bare context
// error) an ErrUnavailable: the outcome is unknown.
func known(err error) error {
	if !slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// lose declares the held lock lost with cause, detected how; Do's
// lostExpired only once the validity has run out.
func (l *Lock) lose(cause error, how string) {
	defer l.deliver()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == stateHeld && (how != lostExpired || !l.validUntil.After(l.now())) {
		l.loseLocked(cause, how)
	}
}

// recheck is driver.Recheck; Do, woken, reschedules its extension.
func (l *Lock) recheck() {
	defer l.deliver()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.goneLocked("hold")
	l.notifyLocked()
}

// snapshot is what Do follows of a Lock (see watch).
type snapshot struct {
	until   time.Time
	changed <-chan struct{} // closed at the next change
	held    bool            // held and valid: extensions are due
	done    bool            // released: the server answered a Release
	loss    error           // why the lock is lost, matching ErrLockLost alone
	end     error           // why its holder must stop: the loss, or ErrNotHeld
}

// watch returns a snapshot of the lock. A validity spent while a Release
// was under way or of unknown outcome is a loss (another owner may hold
// the key; Release may still be retried). A Release under way is not the
// end yet: its caller may still need its context.
func (l *Lock) watch() snapshot {
	defer l.deliver()
	l.mu.Lock()
	defer l.mu.Unlock()
	gone := l.goneLocked("hold")
	s := snapshot{until: l.validUntil, changed: l.changedLocked(), held: gone == nil, end: gone,
		done: l.state == stateReleased}
	switch {
	case l.lostCause != nil:
		s.loss = gone // a refused extension's ErrNotHeld becomes detail
		if !errors.Is(gone, ErrLockLost) {
			s.loss = fmt.Errorf("dlock: %w: %w", ErrLockLost, hideSentinels{gone})
		}
	case l.state == stateReleasing && !l.validUntil.After(l.now()):
		s.loss = fmt.Errorf("dlock: %w: validity of %q ran out at %v while its release was under way or of unknown outcome",
			ErrLockLost, l.key, l.validUntil.Round(0).Format(time.RFC3339Nano))
	case l.state == stateReleasing:
		s.end = nil
	}
	if s.loss != nil {
		s.end = s.loss
	}
	return s
}

// goneLocked returns nil while the lock is held and valid, else the error
// of op on it: the loss, or ErrNotHeld once Release was called. A
// validity found spent marks the lock lost.
func (l *Lock) goneLocked(op string) error {
	if l.state == stateHeld && !l.validUntil.After(l.now()) {
		l.loseLocked(fmt.Errorf("dlock: %w: validity of %q ran out at %v", ErrLockLost, l.key, l.validUntil.Round(0).Format(time.RFC3339Nano)), lostExpired)
	}
	switch {
	case l.lostCause != nil:
		return l.lostCause
	case l.state == stateReleasing:
		return &opError{op, l.key, fmt.Errorf("%w (being released)", ErrNotHeld)}
	case l.state == stateReleased:
		return &opError{op, l.key, fmt.Errorf("%w (released)", ErrNotHeld)}
	}
	return nil
}

// How a loss was detected (Event.Detected).
const (
	lostRefused = "extension refused"
	lostSession = "session gone"
	lostExpired = "validity ran out"
)

func (l *Lock) loseLocked(cause error, how string) {
	l.lostCause, l.lostHow = cause, how
	l.setStateLocked(stateLost)
	l.recordLocked(context.Background(), Event{Kind: EventLost, Err: cause, Detected: how})
}

func (l *Lock) setStateLocked(s lockState) {
	l.state = s
	l.notifyLocked()
}

func (l *Lock) setValidLocked(until time.Time) {
	l.validUntil = until
	l.notifyLocked()
}

func (l *Lock) changedLocked() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// notifyLocked tells the waiters, if any, that the lock changed.
func (l *Lock) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}
