package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// A ReleaseNotifier is a Locker that can announce releases, so a waiting
// Acquire retries as soon as the holder lets go instead of at its next poll.
// A notification is only a hint: the retry still has to win the lock.
type ReleaseNotifier interface {
	// NotifyRelease registers interest in key. The channel receives a value
	// when key may have been released; stop ends the interest and must be
	// called exactly once.
	NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func())
}

// Acquire takes the lock on key with l, waiting while another owner holds it.
// Between attempts it sleeps the retry delay plus jitter (see WithRetryDelay,
// WithRetryJitter), or less when l announces a release (ReleaseNotifier).
//
// It returns a held lock, or an error: one matching both ErrNotAcquired and
// ctx.Err() when the context ended first; ErrNotAcquired when the retry
// budget (WithRetryCount) was spent; and without retrying, ErrUnavailable or
// ErrInvalid from the backend.
func Acquire(ctx context.Context, l Locker, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if l == nil {
		return nil, Invalidf("nil Locker")
	}
	if ctx == nil {
		return nil, Invalidf("nil context")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return acquire(ctx, l, key, ttl, &cfg)
}

func acquire(ctx context.Context, l Locker, key string, ttl time.Duration, cfg *config) (*Lock, error) {
	var released <-chan struct{}
	if n, ok := l.(ReleaseNotifier); ok && cfg.retryCount != 0 {
		// Listen before the first attempt, so a release that comes between
		// a failed attempt and the wait is not missed.
		var stop func()
		released, stop = n.NotifyRelease(ctx, key)
		defer stop()
	}
	var timer *time.Timer
	for attempt := 0; ; attempt++ {
		lock, err := l.TryAcquire(ctx, key, ttl)
		if err == nil {
			return lock, nil
		}
		if ctx.Err() != nil {
			return nil, cancelled(ctx, key, err)
		}
		if !errors.Is(err, ErrNotAcquired) {
			return nil, err
		}
		if cfg.retryCount != RetryForever && attempt >= cfg.retryCount {
			return nil, err
		}

		wait := cfg.retryDelay
		if cfg.retryJitter > 0 {
			wait += rand.N(cfg.retryJitter)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, cancelled(ctx, key, err)
		case <-released:
			// Try at once; the timer is reset on the next round.
		case <-timer.C:
		}
	}
}

// cancelled builds the error of a wait that ended with its context: it
// matches ErrNotAcquired and ctx.Err(), and keeps the last attempt's detail.
func cancelled(ctx context.Context, key string, last error) error {
	err := errors.Join(ErrNotAcquired, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = errors.Join(err, cause)
	}
	return fmt.Errorf("dlock: acquire %q: %w (last attempt: %v)", key, err, last)
}
