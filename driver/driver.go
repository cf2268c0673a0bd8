// Package driver is for authors of dlock backends, not for users of locks:
// it holds what a backend needs to implement dlock.Locker (the Grant behind
// every Lock, the constructor of a Lock, release announcements, events)
// and the two rules every backend must apply the same way: which
// arguments to refuse (Check) and how long a lock is valid (ValidUntil).
// Package locktest is the conformance suite that proves a backend against
// the contract.
//
// A backend's TryAcquire checks its arguments (Check), takes the lock on
// its servers under a token no other grant has (128 random bits, such as
// crypto/rand.Text's), measures the validity from the moment before it
// sent the request (ValidUntil), and returns NewLock(key, token, fence,
// validUntil, grant), through its Events so that observers see the
// attempt and the lock. The Lock handle
// does the bookkeeping every backend shares: its state, double releases,
// one call at a time, validity that runs out; dlock.Acquire and dlock.Do
// build waiting and auto-extension on top, and are the only way to wait
// (see ReleaseNotifier). Errors must match exactly one of dlock's
// sentinels (dlock.ErrNotAcquired, ErrNotHeld, ErrLockLost, ErrUnavailable,
// ErrMisconfigured, ErrInvalid), with node-level detail in a
// *dlock.NodeError.
package driver

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// Grant is a backend's side of one acquired lock: the two operations that
// talk to servers. The Lock handle wraps it with the bookkeeping every
// backend shares (state, validity, double release), so a Grant may assume
// it is called on a lock it believes held, and never concurrently with
// itself. A Grant of a backend with several nodes may also have a method
// Nodes() int: how many of them granted the lock (dlock.Event's Nodes; one
// without it).
//
// A Grant of a backend whose time is not the machine's may also have a
// method Now() time.Time, whose readings never go back: the Lock then
// reads the time from it instead of time.Now (Held, Remaining, Extend, and
// Do's schedule and loss), and the backend computes the validity
// deadlines it hands over on that clock too. It is for a backend whose
// tests move its clock by hand (package dlocktest); such a backend calls
// Recheck for its locks when the clock jumps.
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

// NewLock wraps a grant that was acquired with token and fence and is
// valid until validUntil, which must carry a monotonic clock reading (come
// from time.Now, not from a parsed or serialized time).
func NewLock(key, token string, fence uint64, validUntil time.Time, g Grant) *dlock.Lock {
	return bridge.NewLock(key, -1, token, fence, validUntil, g).(*dlock.Lock)
}

// NewPermit is NewLock for a semaphore's permit on slot of name (see
// Semaphores): the Lock's Key is the slot's key, {name}#slot (name#slot
// for a name that has a Redis Cluster hash tag already), its Slot is slot.
func NewPermit(name string, slot int, token string, fence uint64, validUntil time.Time, g Grant) *dlock.Lock {
	return bridge.NewLock(bridge.SlotKey(name, slot), slot, token, fence, validUntil, g).(*dlock.Lock)
}

// Lost declares lock lost with cause, which must match dlock.ErrLockLost:
// from then on Held reports false, Extend returns cause, and Do ends its
// function's context with it. A backend calls it when it learns that the
// lock is gone without being asked, such as when it revoked the lock's
// session itself. It does nothing to a lock that is no longer held (lost,
// or being released). It must not be called while holding a mutex that an
// observer of the lock's events may need.
func Lost(lock *dlock.Lock, cause error) { bridge.Lose(lock, cause) }

// Recheck makes lock look at its clock again, for a backend whose Grant
// has a clock of its own (a Now method) that just jumped forward: a
// validity that ran out is declared lost at once (dlock.Event's Detected
// "validity ran out"), and dlock.Do, whose timers run on the machine's
// clock, reschedules the lock's next extension for the new time. It does
// nothing to a lock that is no longer held, and, like Lost, must not be
// called while holding a mutex that an observer of the lock's events may
// need.
func Recheck(lock *dlock.Lock) {
	if lock != nil {
		bridge.Recheck(lock)
	}
}

// A ReleaseNotifier is a Locker that can announce releases, so that
// dlock.Acquire retries as soon as the holder lets go instead of at its
// next poll. A notification is only a hint: the retry still has to win the
// lock.
//
// It is also how a backend's own way of waiting is reached, since
// dlock.Acquire and dlock.Do are the only waits: they register before
// their first attempt (unless they make just one) and stop after their
// last, so a registration tells the backend that a wait on key is in
// progress in this process, and its TryAcquire may keep a place for it
// (redislock and redlock queue for a wake-up that way, etcdlock in the
// lock's own queue).
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
	// ReadTerm returns the holder of key's lock now: a dlock.Term with Led
	// set, Fence the fence of the holder's grant, Leader the identity the
	// holder published with it (see Identity; else what the backend knows
	// of the holder, such as the host:pid of a holder record; else ""),
	// and Since when the grant was made, where the backend knows it.
	// Fields it cannot know are zero. When nobody holds the lock it
	// returns a Term with Led false, and no error. It returns an error
	// matching dlock.ErrUnavailable when the servers could not be reached
	// or do not agree on a holder (a quorum backend without a majority),
	// and dlock.ErrInvalid for a bad key.
	ReadTerm(ctx context.Context, key string) (dlock.Term, error)
}

// Identity returns the identity that the grant of a TryAcquire called with
// ctx must publish (dlock.WithIdentity: an election's candidate, host:pid
// by default), or "" when it need publish none. dlock.Acquire, dlock.Do
// and the elections built on them put it in the context of each attempt
// they make; a bare TryAcquire has none. A backend with a TermReader
// stores it with the grant (in the same request, where it can), so that
// ReadTerm reports it; one that cannot carry it as given (too long for its
// servers) refuses the attempt with dlock.ErrInvalid.
func Identity(ctx context.Context) string { return bridge.Identity(ctx) }

// Check returns an error matching dlock.ErrInvalid for the arguments of a
// TryAcquire that every backend refuses before it sends anything (the
// conformance suite, package locktest, checks that it does): a nil ctx, an
// empty key, a ttl that is not positive, under one millisecond (Redis's PX
// would round it to zero), above 30 days (a crashed holder would block
// everyone for that long), or so short that ValidUntil leaves no validity.
// TTLs that are not whole milliseconds are accepted; backends round them
// up.
func Check(ctx context.Context, key string, ttl time.Duration) error {
	if ctx == nil {
		return nodeerr.Invalidf("nil context")
	}
	if err := nodeerr.Invalid(bridge.KeyProblem(key)); err != nil {
		return err
	}
	return nodeerr.Invalid(bridge.ValidityProblem(ttl, bridge.DefaultDriftFactor))
}

// ValidUntil returns the validity deadline of a lock acquired or extended
// with ttl by a request sent at start: start + ttl - drift, where drift,
// the margin for clocks that tick at slightly different rates, is 1% of
// ttl plus 2 ms (1 ms for a server's expiry precision and 1 ms as a
// floor), as in the Redis documentation's reference clients. Measuring
// from the moment before the request was sent is what makes it safe: the
// server started its TTL later than that. A deadline that is not after
// the moment the reply arrived means the lock must not be used.
func ValidUntil(start time.Time, ttl time.Duration) time.Time {
	return bridge.ValidUntil(start, ttl, bridge.DefaultDriftFactor)
}

// Semaphores is a Locker with semaphores of its own (every backend of this
// repository has them): dlock.Semaphore returns its Semaphore(limit), and
// dlock.SetLimit calls its SetLimit. A Locker without it gets semaphores
// from package dlock that try the slots one by one and keep no limit on
// the servers.
type Semaphores interface {
	// Semaphore returns a Locker whose TryAcquire(ctx, name, ttl) makes
	// one attempt to grant one of limit permits of name: a lock on a free
	// slot of name, from 0 to limit - 1, made with NewPermit, whose
	// Extend and Release act on that slot alone. Successive holders of a
	// slot get increasing fences, by the backend's fence rules. The first
	// grant records limit on the servers, and a grant is made only while
	// fewer permits than the recorded limit are held; an attempt with
	// another limit fails with an error matching dlock.ErrInvalid (no
	// wait can change it). The record lasts as long as a permit of name
	// may be held, and no longer. TryAcquire rejects a limit below 1 or
	// above 1000 with dlock.ErrInvalid, and returns dlock.ErrNotAcquired
	// when every permit is held.
	Semaphore(limit int) dlock.Locker

	// SetLimit records limit as the limit of name's semaphore on the
	// servers, in place of the one recorded: permits held above it are
	// kept until they are released or lost, and no new permit is
	// granted while limit or more are held. With no permit of name held
	// there is no record to change, and it does nothing.
	SetLimit(ctx context.Context, name string, limit int) error
}
