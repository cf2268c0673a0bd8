package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn while holding the lock on key: it waits for the lock as Acquire
// does, calls fn with a context derived from ctx, keeps the lock extended in
// the background while fn runs, and releases it when fn returns (or panics).
//
// The context passed to fn is cancelled with cause ErrLockLost (see
// context.Cause) as soon as an extension is refused or the lock's validity
// runs out before an extension succeeded; fn must check it before every step
// that must not happen without the lock. Extension starts when the lock has
// WithExtendThreshold of its validity left (half the TTL by default) and
// stops for good once WithMaxHold would be exceeded.
//
// The lock itself (its fence, its validity) is available to fn through
// LockFromContext.
//
// Do returns fn's error joined with the loss cause, if the lock was lost, and
// with the release error, if any. When the lock cannot be acquired fn is not
// called and the acquire error is returned. Do starts one goroutine for the
// extension and waits for it before returning.
func Do(ctx context.Context, l Locker, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) (err error) {
	switch {
	case l == nil:
		return Invalidf("nil Locker")
	case ctx == nil:
		return Invalidf("nil context")
	case fn == nil:
		return Invalidf("nil function")
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := cfg.checkDo(ttl); err != nil {
		return err
	}

	lock, err := acquire(ctx, l, key, ttl, &cfg)
	if err != nil {
		return err
	}

	fnCtx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, lock))
	defer cancel(nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepAlive(ctx, lock, ttl, &cfg, stop, cancel)
	}()

	defer func() {
		close(stop)
		<-done
		lost := lostCause(fnCtx)
		relCtx, cancelRel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout(ttl))
		relErr := lock.Release(relCtx)
		cancelRel()
		if lost != nil && errors.Is(relErr, ErrNotHeld) {
			relErr = nil // already reported as lost
		}
		if r := recover(); r != nil {
			panic(r) // released above; let the panic go on
		}
		err = errors.Join(err, lost, relErr)
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

// lostCause returns the cause with which fn's context was cancelled if that
// was a lost lock, and nil otherwise.
func lostCause(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrLockLost) {
		return cause
	}
	return nil
}

// releaseTimeout bounds the release after fn returns; it must not depend on
// the caller's context, which may be the very reason fn returned.
func releaseTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl, time.Second), 10*time.Second)
}

// keepAlive extends lock until stop is closed. It declares the lock lost,
// and cancels fn's context with ErrLockLost, when an extension is refused or
// the validity deadline passes first, even while an extension request is
// still in flight.
func keepAlive(ctx context.Context, lock *Lock, ttl time.Duration, cfg *config, stop <-chan struct{}, cancel context.CancelCauseFunc) {
	lose := func(cause error) {
		lock.markLost(cause)
		cancel(cause)
	}
	acquiredAt := time.Now()
	// Extensions do not stop when ctx is cancelled: fn may still be
	// finishing, and it needs the lock until it returns.
	extCtx := context.WithoutCancel(ctx)

	deadline := time.NewTimer(time.Until(lock.ValidUntil()))
	defer deadline.Stop()
	next := time.NewTimer(time.Until(lock.ValidUntil().Add(-cfg.extendThreshold)))
	defer next.Stop()
	retryDelay := max(cfg.extendThreshold/8, time.Millisecond)

	for {
		select {
		case <-stop:
			return
		case <-deadline.C:
			lose(fmt.Errorf("%w: validity of %q ran out before an extension succeeded", ErrLockLost, lock.Key()))
			return
		case <-next.C:
		}

		if cfg.maxHold > 0 && time.Since(acquiredAt)+ttl > cfg.maxHold {
			// No more extensions: let the validity run out.
			next.Stop()
			select {
			case <-stop:
			case <-deadline.C:
				lose(fmt.Errorf("%w: %q reached its hold limit of %v", ErrLockLost, lock.Key(), cfg.maxHold))
			}
			return
		}

		reqCtx, cancelReq := context.WithDeadline(extCtx, lock.ValidUntil())
		result := make(chan error, 1)
		go func() { result <- lock.Extend(reqCtx, ttl) }()

		var err error
		select {
		case err = <-result:
		case <-deadline.C:
			lose(fmt.Errorf("%w: validity of %q ran out while an extension was in flight", ErrLockLost, lock.Key()))
			cancelReq()
			<-result
			return
		case <-stop:
			cancelReq()
			<-result
			return
		}
		cancelReq()

		switch {
		case err == nil:
			deadline.Reset(time.Until(lock.ValidUntil()))
			next.Reset(time.Until(lock.ValidUntil().Add(-cfg.extendThreshold)))
		case errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost):
			lose(fmt.Errorf("%w: %w", ErrLockLost, err))
			return
		default:
			// Unreachable backend: the lock may still be held. Try again
			// soon; the deadline timer declares the loss if it lasts.
			next.Reset(retryDelay)
		}
	}
}
