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
// computing validity: the margin is ttl × f plus 2 ms. It must be in
// [0, 1). The default is 0.01.
func WithDriftFactor(f float64) Option {
	return func(l *Locker) error { return l.cfg.SetDriftFactor(f) }
}

// WithLogger sets where the Locker logs its events (see Events in package
// dlock's documentation). The default is slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) error { return l.cfg.SetLogger(logger) }
}

// WithObserver adds an observer of the Locker's attempts and locks (see
// Events in package dlock's documentation). The default is none, beside
// the logger's.
func WithObserver(observe func(ctx context.Context, e dlock.Event)) Option {
	return func(l *Locker) error { return l.cfg.AddObserver(observe) }
}
