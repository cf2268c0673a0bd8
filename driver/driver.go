// Package driver is for authors of dlock backends: what a backend needs
// to implement dlock.Locker, and the two rules every backend applies
// (Check, ValidUntil). Package locktest proves a backend against the
// contract.
//
// A backend's TryAcquire, made through its Events, checks its arguments
// (Check), takes the lock under a token no other grant has (128 random
// bits, such as crypto/rand.Text's), measures the validity from before it
// sent the request (ValidUntil), and returns NewLock(key, token, fence,
// validUntil, grant). The Lock handle keeps the state every backend shares
// (double releases, one call at a time, validity that runs out);
// dlock.Acquire and dlock.Do do the waiting (see ReleaseNotifier). Errors
// match exactly one of dlock's sentinels, with node-level detail in a
// *dlock.NodeError.
package driver

import (
	"cmp"
	"context"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

// Grant is a backend's side of one acquired lock: the two operations that
// talk to servers. The Lock handle calls it only on a lock it believes
// held, never concurrently with itself. A Grant may also have a method
// Nodes() int (how many nodes granted the lock; one without it), and a
// method Now() time.Time that never goes back, for a backend whose time is
// not the machine's (package dlocktest's): the Lock reads it instead of
// time.Now, and the backend calls Recheck when that clock jumps.
type Grant interface {
	// Extend resets the lock's TTL to ttl if the server(s) still hold the
	// lock's token, and returns the new validity deadline (see ValidUntil).
	// It returns an error matching dlock.ErrNotHeld when the token is gone,
	// and changes nothing then.
	Extend(ctx context.Context, ttl time.Duration) (validUntil time.Time, err error)

	// Release deletes the lock if it still holds the token. It returns an
	// error matching dlock.ErrNotHeld when the token was already gone.
	Release(ctx context.Context) error
}

// NewLock wraps a grant acquired with token and fence, valid until
// validUntil, which must carry a monotonic clock reading (from time.Now).
func NewLock(key, token string, fence uint64, validUntil time.Time, g Grant) *dlock.Lock {
	return bridge.NewLock(key, -1, token, fence, validUntil, g).(*dlock.Lock)
}

// NewPermit is NewLock for a semaphore's permit on slot of name: its Key
// is the slot's key (see dlock.Semaphore), its Slot is slot.
func NewPermit(name string, slot int, token string, fence uint64, validUntil time.Time, g Grant) *dlock.Lock {
	return bridge.NewLock(bridge.SlotKey(name, slot), slot, token, fence, validUntil, g).(*dlock.Lock)
}

// Lost declares lock lost with cause, which must match dlock.ErrLockLost:
// Held reports false, Extend returns cause, and Do ends its function's
// context with it. A backend calls it when it learns unasked that the lock
// is gone (its session was revoked). It does nothing to a lock no longer
// held, and must not be called under a mutex that an observer of the
// lock's events may need.
func Lost(lock *dlock.Lock, cause error) { bridge.Lose(lock, cause) }

// Recheck makes lock look again at its Grant's clock (Now), which just
// jumped forward: a validity that ran out is declared lost, and dlock.Do,
// whose timers run on the machine's clock, reschedules its extension. It
// has Lost's limits.
func Recheck(lock *dlock.Lock) {
	if lock != nil {
		bridge.Recheck(lock)
	}
}

// A ReleaseNotifier is a Locker that announces releases, so that
// dlock.Acquire retries as soon as the holder lets go (the retry still has
// to win). dlock.Acquire registers before its first attempt (unless it
// makes just one) and stops after its last, so a registration also says
// that a wait on key is in progress, for which TryAcquire may keep a place
// (redislock and redlock queue for a wake-up, etcdlock in the lock's own
// queue).
type ReleaseNotifier interface {
	// NotifyRelease registers interest in key. The channel receives a
	// value when key may have been released; a nil channel says that no
	// release of key will be announced (the wait polls). stop ends the
	// interest and must be called exactly once.
	NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func())
}

// A TermReader is a Locker that can read who holds the lock on a key, for
// dlock.Leader and dlock.Observe: without it they can only probe with
// TryAcquire, and say that someone leads, not who nor in which term.
type TermReader interface {
	// ReadTerm returns the holder of key's lock now: Led set, Fence the
	// holder's grant's, Leader the identity it published (see Identity;
	// else what the backend knows, such as a holder record's host:pid),
	// Since when it was granted; zero what the backend cannot know. Nobody
	// holding it is a Term with Led false and no error. It returns
	// dlock.ErrUnavailable when the servers could not be reached or agree
	// on no holder, and dlock.ErrInvalid for a bad key.
	ReadTerm(ctx context.Context, key string) (dlock.Term, error)
}

// Identity returns the identity that the grant of a TryAcquire called with
// ctx must publish (dlock.WithIdentity), or "": dlock.Acquire and dlock.Do
// put it in each attempt's context. A backend with a TermReader stores it
// with the grant (in the same request, where it can) for ReadTerm; one
// that cannot carry it as given refuses the attempt with dlock.ErrInvalid.
func Identity(ctx context.Context) string { return bridge.Identity(ctx) }

// Check returns an error matching dlock.ErrInvalid for the arguments of a
// TryAcquire that every backend refuses before it sends anything (package
// locktest checks that it does): a nil ctx, an empty key, a ttl under one
// millisecond (Redis's PX would round it to zero), above 30 days (a
// crashed holder would block everyone for that long), or so short that
// ValidUntil leaves no validity. Other TTLs are rounded up to whole
// milliseconds.
func Check(ctx context.Context, key string, ttl time.Duration) error {
	if ctx == nil {
		return bridge.Invalidf("nil context")
	}
	return cmp.Or(bridge.CheckKey(key), bridge.CheckValidity(ttl, bridge.DefaultDriftFactor))
}

// ValidUntil returns the validity deadline of a lock acquired or extended
// with ttl by a request sent at start: start + ttl - drift, where drift,
// for clocks that tick at slightly different rates, is 1% of ttl plus
// 2 ms (a server's 1 ms expiry precision and a 1 ms floor), as in the
// Redis documentation's reference clients. Measuring from before the
// request was sent is what makes it safe: the server started its TTL
// later. A deadline not after the reply's arrival means the lock must not
// be used.
func ValidUntil(start time.Time, ttl time.Duration) time.Time {
	return bridge.ValidUntil(start, ttl, bridge.DefaultDriftFactor)
}

// Semaphores is a Locker with semaphores of its own, for dlock.Semaphore
// and dlock.SetLimit, which document their contract. Without it, package
// dlock's semaphores try the slots one by one and keep no limit.
type Semaphores interface {
	// Semaphore's TryAcquire makes one attempt to grant a permit, made
	// with NewPermit, whose Extend and Release act on its slot alone, with
	// increasing fences per slot; a grant is made only while fewer permits
	// than the recorded limit are held.
	Semaphore(limit int) dlock.Locker
	SetLimit(ctx context.Context, name string, limit int) error
}
