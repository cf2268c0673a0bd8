package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Do runs fn while holding the lock on key: it waits for the lock as Acquire
// does, calls fn with a context derived from ctx, keeps the lock extended in
// the background while fn runs, and releases it when fn returns (or panics).
// fn finds the lock (its fence, its validity) with LockFromContext.
//
// The context passed to fn ends as soon as the lock may be lost, with cause
// ErrLockLost (see context.Cause): when an extension is refused, the backend
// reports the lock's session gone, or the validity runs out before an
// extension succeeded (even while one still hangs). Its Err, Done and
// context.Cause compare the validity with the clock themselves, so they
// report the loss at the first look after the validity ran out, even in a
// process resumed after a pause; a context derived from it learns of the
// loss a moment later, when Do's goroutine runs. fn must check it before
// every step that must not happen without the lock.
//
// Extension starts when the lock has WithExtendThreshold of its validity
// left (half the TTL by default) and stops for good once WithMaxHold would
// be exceeded. fn may extend the lock itself, with any TTL: Do's deadline
// and next extension follow the new validity (with a TTL shorter than the
// threshold, Do extends again at once, with its own TTL). fn may release it
// too, with its own context: Do stops extending, the context ends (cause
// matching ErrNotHeld) once the release is done, and Do does not release
// again. A release still in flight, or of unknown outcome
// (ErrUnavailable), when the validity runs out is a loss (the key may have
// expired and another owner taken it): the context ends with ErrLockLost,
// Do returns it, and releases again after fn returns.
//
// Do returns fn's error as it is when nothing else went wrong. When the
// lock was lost, it returns fn's error (if any) followed by the loss cause,
// on one line, matching ErrLockLost (a release error after the loss is
// only detail in its message), even when ctx was cancelled first and fn's
// context carries ctx's cause; otherwise fn's error followed by the release
// error, if any. When the lock cannot be acquired fn is not called and the
// acquire error is returned. Do starts one goroutine for the extension (and
// one per extension in flight) and waits for them before returning.
func Do(ctx context.Context, l Locker, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return bridge.Invalidf("nil function")
	}
	cfg, err := doConfig(ctx, l, ttl, opts)
	if err != nil {
		return err
	}
	return do(ctx, l, key, ttl, &cfg, fn)
}

// doConfig checks the arguments of Do, Lead and Campaign but fn.
func doConfig(ctx context.Context, l Locker, ttl time.Duration, opts []Option) (config, error) {
	cfg, err := newConfig(ctx, l, opts)
	if err != nil {
		return cfg, err
	}
	if err := bridge.CheckTTL(ttl); err != nil {
		return cfg, err
	}
	if cfg.extendThreshold >= ttl {
		return cfg, bridge.Invalidf("extend threshold %v must be below the ttl %v", cfg.extendThreshold, ttl)
	}
	cfg.extendThreshold = cmp.Or(cfg.extendThreshold, ttl/2)
	return cfg, nil
}

// do is Do with its arguments checked.
func do(ctx context.Context, l Locker, key string, ttl time.Duration, cfg *config, fn func(ctx context.Context) error) (err error) {
	lock, err := acquire(ctx, l, key, ttl, cfg)
	if err != nil {
		return err
	}

	base, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, lock))
	defer cancel(nil)
	fnCtx := &lockContext{Context: base, lock: lock, cancel: cancel}
	stop := make(chan struct{})
	var keeping sync.WaitGroup
	keeping.Go(func() { keepAlive(ctx, lock, ttl, cfg, stop, cancel) })

	defer func() {
		close(stop)
		keeping.Wait()
		fnCtx.check() // a validity that ran out as fn returned is a loss too
		s := lock.watch()
		lost := context.Cause(base)
		if !errors.Is(lost, ErrLockLost) {
			// base may have ended with ctx's cause before the loss: the
			// handle's record is what counts.
			lost = s.loss
		}
		var relErr error
		if !s.done { // fn may have released it itself
			relErr = releaseDetached(ctx, lock, ttl)
		}
		err = doResult(err, lost, relErr)
	}()
	return fn(fnCtx)
}

type lockKey struct{}

// LockFromContext returns the lock that Do holds for the function it called
// with ctx, or nil when ctx does not come from Do. The function uses it to
// read the fence it must pass to the protected resource.
func LockFromContext(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}

// lockContext is the context Do gives its function. Err, Done and Value
// (through which context.Cause finds the cancellation) look at the lock
// first: Do's keep-alive goroutine may run a moment late in a process
// resumed after SIGSTOP.
type lockContext struct {
	context.Context
	lock   *Lock
	cancel context.CancelCauseFunc
}

func (c *lockContext) Err() error {
	c.check()
	return c.Context.Err()
}

func (c *lockContext) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

func (c *lockContext) Value(key any) any {
	c.check()
	return c.Context.Value(key)
}

// check ends the context if the lock was lost or released.
func (c *lockContext) check() {
	if c.Context.Err() != nil {
		return
	}
	if cause := c.lock.watch().end; cause != nil {
		c.cancel(cause)
	}
}

// doResult is Do's error (see Do).
func doResult(fnErr, lost, relErr error) error {
	own := relErr
	if lost != nil {
		own = lost
		if relErr != nil && !errors.Is(relErr, ErrNotHeld) && !errors.Is(relErr, ErrLockLost) {
			own = fmt.Errorf("%w; %w", lost, hideSentinels{relErr})
		}
		if errors.Is(fnErr, lost) {
			own = nil // fn returned the cause itself
		}
	}
	switch {
	case own == nil:
		return fnErr
	case fnErr == nil:
		return own
	}
	return fmt.Errorf("%w; %w", fnErr, own)
}

// releaseDetached releases lock within a bound of its own: ctx may be why
// the work returned.
func releaseDetached(ctx context.Context, lock *Lock, ttl time.Duration) error {
	bound := min(max(ttl, time.Second), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	return lock.Release(ctx)
}

// keepAlive extends lock until stop is closed, following every change of
// the handle (fn's own Extend and Release too), and calls end when the
// lock is no longer held.
func keepAlive(ctx context.Context, lock *Lock, ttl time.Duration, cfg *config, stop <-chan struct{}, end context.CancelCauseFunc) {
	k := keeper{cfg: cfg, acquiredAt: lock.now(),
		// Extensions do not stop when ctx is cancelled: fn may still be
		// finishing, and it needs the lock until it returns.
		extCtx:   context.WithoutCancel(ctx),
		deadline: time.NewTimer(time.Hour), next: time.NewTimer(time.Hour)}
	defer k.close()
	for {
		s := lock.watch()
		if s.end != nil {
			end(s.end)
			return
		}
		k.arm(s, lock.now())
		select {
		case <-stop:
			return
		case <-s.changed: // an extension, fn's own Extend or Release, a loss
		case <-k.deadline.C:
			cause := fmt.Errorf("dlock: %w: validity of %q ran out %w", ErrLockLost, lock.Key(), k.why())
			lock.lose(cause, lostExpired)
		case <-k.next.C:
			if cfg.maxHold > 0 && lock.now().Sub(k.acquiredAt)+ttl > cfg.maxHold {
				k.limited = true // let the validity run out
				continue
			}
			k.result, k.cancelReq = extendAsync(k.extCtx, lock, ttl, s.until)
		case err := <-k.result:
			k.cancelReq()
			k.result, k.retryAt, k.lastErr = nil, time.Time{}, err
			if err != nil {
				// A refusal marked the lock lost; otherwise it may still be
				// held: try again soon, until the deadline.
				k.retryAt = lock.now().Add(max(cfg.extendThreshold/8, time.Millisecond))
			}
		}
	}
}

// keeper is keepAlive's state.
type keeper struct {
	cfg            *config
	acquiredAt     time.Time
	extCtx         context.Context
	deadline, next *time.Timer // the validity's end; the next extension

	result    <-chan error // the extension in flight, if any
	cancelReq context.CancelFunc
	retryAt   time.Time // after a failed extension: when to try again
	lastErr   error     // that extension's error
	limited   bool      // WithMaxHold reached: no more extensions
}

// arm sets the timers for s at now: the deadline at the validity's end,
// and the next extension unless none is due.
func (k *keeper) arm(s snapshot, now time.Time) {
	k.deadline.Reset(s.until.Sub(now))
	switch {
	case !s.held, k.result != nil, k.limited:
		k.next.Stop()
	case !k.retryAt.IsZero():
		k.next.Reset(k.retryAt.Sub(now))
	default:
		k.next.Reset(s.until.Add(-k.cfg.extendThreshold).Sub(now))
	}
}

// why says why the validity ran out, for the loss's cause.
func (k *keeper) why() error {
	switch {
	case k.result != nil:
		return errors.New("while an extension was in flight")
	case k.limited:
		return fmt.Errorf("after the hold limit of %v stopped extensions", k.cfg.maxHold)
	case k.lastErr != nil:
		return fmt.Errorf("before an extension succeeded: %w", hideSentinels{k.lastErr})
	}
	return errors.New("before it was extended")
}

// close stops the timers and abandons the extension in flight, waiting
// for its goroutine.
func (k *keeper) close() {
	k.deadline.Stop()
	k.next.Stop()
	if k.result != nil {
		k.cancelReq()
		<-k.result
	}
}

// extendAsync extends lock in a goroutine, within the validity it had.
func extendAsync(ctx context.Context, lock *Lock, ttl time.Duration, until time.Time) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(ctx, until)
	result := make(chan error, 1)
	go func() { result <- lock.Extend(ctx, ttl) }()
	return result, cancel
}
