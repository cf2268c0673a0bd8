package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Locker is what every backend implements: one attempt to take a lock.
//
// TryAcquire makes a single attempt. It returns a held *Lock, or an error
// matching ErrNotAcquired when another owner holds key, ErrUnavailable when
// the backend could not be reached, or ErrInvalid for bad arguments. It never
// returns a lock whose validity is already spent. Acquire and Do build
// waiting and auto-extension on top of it.
type Locker interface {
	TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error)
}

// Grant is a backend's side of one acquired lock: the two operations that
// talk to servers. The Lock handle wraps it with the bookkeeping every backend
// shares (state, validity, double release), so a Grant may assume it is
// called on a lock it believes held, and never concurrently with itself.
type Grant interface {
	// Extend resets the lock's TTL to ttl if the server(s) still hold the
	// lock's token, and returns the new validity deadline (see ValidUntil).
	// It returns an error matching ErrNotHeld when the token is gone, and
	// changes nothing then.
	Extend(ctx context.Context, ttl time.Duration) (validUntil time.Time, err error)

	// Release deletes the lock if it still holds the token. It returns an
	// error matching ErrNotHeld when the token was already gone.
	Release(ctx context.Context) error
}

type lockState uint8

const (
	stateHeld lockState = iota
	stateReleased
	stateLost
)

// Lock is a held lock: its key, the random token that proves ownership, the
// fencing token, and the validity deadline after which the holder must
// assume the lock is gone. Its methods are safe for concurrent use.
//
// A Lock is never revived: once released or lost, Extend and Release return
// errors and Held reports false, even if a late server reply says otherwise.
type Lock struct {
	key   string
	token string
	fence uint64
	grant Grant
	now   func() time.Time

	mu         sync.Mutex
	validUntil time.Time
	state      lockState
	lostCause  error
}

// NewLock is for backends: it wraps a grant that was acquired with token and
// fence and is valid until validUntil, which must carry a monotonic clock
// reading (come from time.Now, not from a parsed or serialized time).
func NewLock(key, token string, fence uint64, validUntil time.Time, g Grant) *Lock {
	return &Lock{key: key, token: token, fence: fence, grant: g, now: time.Now, validUntil: validUntil}
}

// Key returns the locked key, as the caller named it (without any prefix a
// backend adds).
func (l *Lock) Key() string { return l.key }

// Token returns the random value that identifies this holder on the server.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token of this grant: a number greater than the
// fence of every earlier grant of the same key. Pass it to the protected
// resource (see package fence) so it can reject writes from stale holders.
func (l *Lock) Fence() uint64 { return l.fence }

// ValidUntil returns the moment (on the monotonic clock) until which the lock
// is known to be held, assuming clocks tick at about the same rate. After it
// the key may have expired and another owner may hold it.
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

// Held reports whether the lock is believed held: not released, not
// declared lost, and within its validity. It asks no server.
func (l *Lock) Held() bool { return l.Remaining() > 0 }

// Extend resets the lock's TTL to ttl (whole milliseconds, rounded up) if it
// is still held, and moves ValidUntil accordingly. It returns an error
// matching ErrNotHeld when the server no longer has the lock or the handle was
// released, ErrLockLost when the handle was declared lost or its validity ran
// out before the extension came back, ErrUnavailable when the backend could
// not be reached (the lock may still be held; retry before ValidUntil), and
// ErrInvalid for a bad ttl.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	if err := l.check("extend"); err != nil {
		return err
	}
	until, err := l.grant.Extend(ctx, ttl)

	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked("extend"); err != nil {
		return err // released or lost while the request was in flight: stay dead
	}
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			l.state, l.lostCause = stateLost, err
		}
		return fmt.Errorf("dlock: extend %q: %w", l.key, err)
	}
	now := l.now()
	if !l.validUntil.After(now) || !until.After(now) {
		// Too late: someone may have taken the lock in between, so a
		// successful reply cannot make this handle valid again.
		l.state, l.lostCause = stateLost, fmt.Errorf("%w: validity of %q ran out while extending", ErrLockLost, l.key)
		return l.lostCause
	}
	l.validUntil = until
	return nil
}

// Release deletes the lock if this holder still owns it. Releasing twice, or
// releasing a lock that expired or was taken over, returns an error matching
// ErrNotHeld and never touches another owner's lock. When the backend could
// not be reached (ErrUnavailable or a context error) the lock may still be
// held, and Release may be called again. Release tries the server
// even when the handle's validity has run out, so that a key that is still
// there does not block others until its TTL ends.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.state == stateReleased {
		l.mu.Unlock()
		return fmt.Errorf("dlock: release %q: %w (already released)", l.key, ErrNotHeld)
	}
	l.state = stateReleased
	l.mu.Unlock()

	if err := l.grant.Release(ctx); err != nil {
		if !errors.Is(err, ErrNotHeld) {
			// The server may still hold the lock: let the caller retry.
			l.mu.Lock()
			if l.state == stateReleased {
				l.state = stateHeld
			}
			l.mu.Unlock()
		}
		return fmt.Errorf("dlock: release %q: %w", l.key, err)
	}
	return nil
}

// markLost declares the lock lost with cause; from then on it is never
// reported held. It is how Do records a failed auto-extension.
func (l *Lock) markLost(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == stateHeld {
		l.state, l.lostCause = stateLost, cause
	}
}

func (l *Lock) check(op string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked(op); err != nil {
		return err
	}
	if !l.validUntil.After(l.now()) {
		l.state = stateLost
		l.lostCause = fmt.Errorf("%w: validity of %q ran out at %v", ErrLockLost, l.key, l.validUntil.Round(0).Format(time.RFC3339Nano))
		return l.lostCause
	}
	return nil
}

func (l *Lock) checkLocked(op string) error {
	switch l.state {
	case stateReleased:
		return fmt.Errorf("dlock: %s %q: %w (released)", op, l.key, ErrNotHeld)
	case stateLost:
		return fmt.Errorf("dlock: %s %q: %w", op, l.key, l.lostCause)
	}
	return nil
}
