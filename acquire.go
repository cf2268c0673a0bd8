package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// releaseNotifier is driver.ReleaseNotifier.
type releaseNotifier interface {
	NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func())
}

// Acquire takes the lock on key with l, waiting while another owner holds it
// and through short outages of the backend. Between attempts it sleeps the
// retry delay plus jitter (see WithRetryDelay, WithRetryJitter), or less
// when l announces a release (see driver.ReleaseNotifier). When the backend
// cannot be reached three times in a row it backs off: the delay doubles
// with each further such attempt, up to a second (or the retry delay, if
// longer), half of it random.
//
// It returns a held lock, or an error matching exactly one sentinel:
//
//   - when the retry budget (WithRetryCount) is spent, the last attempt's
//     error: ErrNotAcquired when the lock was busy, ErrUnavailable when the
//     backend could not be reached;
//   - when ctx ends first, an error matching ctx.Err() (and its cause) and
//     the sentinel of the last attempt that ended before ctx did,
//     ErrNotAcquired or ErrUnavailable, with that attempt's error as detail
//     (errors.As finds a *NodeError in it);
//   - at once, without retrying, ErrMisconfigured (the backend refused: fix
//     the setup), ErrInvalid or any other error of an attempt, and one
//     that the backend says waiting cannot change (pglock's
//     ErrPoolExhausted): waiting cannot fix them, and they win over a
//     context that ended meanwhile.
func Acquire(ctx context.Context, l Locker, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	cfg, err := newConfig(ctx, l, opts)
	if err != nil {
		return nil, err
	}
	return acquire(ctx, l, key, ttl, &cfg)
}

func acquire(ctx context.Context, l Locker, key string, ttl time.Duration, cfg *config) (*Lock, error) {
	w := &waiting{identity: cfg.identity, began: time.Now()}
	lock, err := wait(context.WithValue(ctx, waitKey{}, w), l, key, ttl, cfg, w)
	w.report(ctx, key, lock, err)
	return lock, err
}

// wait is Acquire's loop of attempts, counted in w (in ctx).
func wait(ctx context.Context, l Locker, key string, ttl time.Duration, cfg *config, w *waiting) (*Lock, error) {
	var released <-chan struct{}
	if n, ok := l.(releaseNotifier); ok && cfg.retryCount != 0 {
		// Listen before the first attempt, so a release that comes between
		// a failed attempt and the wait is not missed.
		var stop func()
		released, stop = n.NotifyRelease(ctx, key)
		defer stop()
	}
	var last error   // the last attempt that ended before ctx did
	unreachable := 0 // attempts in a row that could not reach the backend
	for w.attempts = 1; ; w.attempts++ {
		lock, err := l.TryAcquire(ctx, key, ttl)
		if err == nil {
			return lock, nil
		}
		busy, down := errors.Is(err, ErrNotAcquired), errors.Is(err, ErrUnavailable)
		if final := (*bridge.Final)(nil); errors.As(err, &final) || !busy && !down {
			return nil, err // waiting cannot change it
		}
		if ctx.Err() != nil {
			return nil, waitEnded(ctx, key, last, err)
		}
		if busy {
			unreachable = 0
		} else {
			unreachable++
		}
		last = err
		if cfg.retryCount != RetryForever && w.attempts > cfg.retryCount {
			return nil, err
		}

		wait := backoff(cfg.retryDelay, unreachable)
		select {
		case <-ctx.Done():
			return nil, waitEnded(ctx, key, last, nil)
		case <-released:
			// Try at once.
		case <-time.After(cfg.jittered(wait)):
		}
	}
}

func (c *config) jittered(d time.Duration) time.Duration {
	if c.retryJitter > 0 {
		d += rand.N(c.retryJitter)
	}
	return d
}

const (
	maxBackoff = time.Second // a waiter notices the end of an outage soon
	// quickRetries unreachable attempts in a row wait no longer than a
	// busy lock: a blip (a Redlock node timeout on a loaded machine).
	quickRetries = 3
)

// backoff is the wait after the n-th unreachable attempt in a row (0: a
// busy one), as Acquire says, from at least 1ms once doubling; its random
// half keeps the waiters an outage stopped from coming back at once.
func backoff(delay time.Duration, n int) time.Duration {
	if n <= quickRetries {
		return delay
	}
	d := max(delay, time.Millisecond)
	limit := max(maxBackoff, delay)
	for i := quickRetries; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}

// waitEnded is the error of a wait that ctx ended (see Acquire); cut is
// the attempt ctx interrupted.
func waitEnded(ctx context.Context, key string, last, cut error) error {
	if last == nil {
		last = cut
	}
	sentinel := ErrNotAcquired
	if !errors.Is(last, ErrNotAcquired) && errors.Is(last, ErrUnavailable) {
		sentinel = ErrUnavailable
	}
	return fmt.Errorf("dlock: acquire %q: %w: %w (last attempt: %w)", key, sentinel, ctxErr(ctx), hideSentinels{last})
}
