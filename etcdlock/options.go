package etcdlock

import (
	"context"
	"log/slog"

	"github.com/dlock-go/dlock"
)

// Option configures a Locker.
type Option func(*Locker) error

// WithPrefix prepends prefix to every lock name: the lock on key lives under
// prefix+key+"/". The default is no prefix, so the name is the one
// concurrency.NewMutex and `etcdctl lock` take. A prefix inside dlock's own
// namespace is rejected with dlock.ErrInvalid.
func WithPrefix(prefix string) Option {
	return func(l *Locker) error { return l.cfg.SetPrefix(prefix) }
}

// WithDriftFactor sets the share of the TTL set aside for clock drift when
// computing validity (see driver.Drift). It must be in [0, 1). The default is
// driver.DefaultDriftFactor (0.01).
func WithDriftFactor(f float64) Option {
	return func(l *Locker) error { return l.cfg.SetDriftFactor(f) }
}

// WithLogger sets where the Locker logs: a Warn record when a lock is lost
// or an extension fails (key, fence, backend, cause), Debug records for
// grants, refusals and releases, nothing at Info (see driver.NewEvents). A
// logger whose handler is slog.DiscardHandler costs nothing. The default is
// slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) error { return l.cfg.SetLogger(logger) }
}

// WithObserver adds an observer of every attempt this Locker makes and every
// lock it takes, from a bare TryAcquire or within dlock.Acquire and
// dlock.Do: attempts, grant or refusal, extensions, loss, release (see
// dlock.Event, and Events in package dlock's documentation). Several
// observers all receive the events. The default is none, beside the
// logger's.
func WithObserver(observe func(ctx context.Context, e dlock.Event)) Option {
	return func(l *Locker) error { return l.cfg.AddObserver(observe) }
}
