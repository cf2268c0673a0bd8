package redislock

import (
	"context"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock"
)

// Option configures a Locker.
type Option func(*Locker) error

// WithPrefix prepends prefix to every lock key, e.g. "locks:"; handles
// report the key without it. dlock's own keys stay in the "dlock:"
// namespace, named after the prefixed key (see Keys in the package
// documentation); a prefix inside that namespace is rejected with
// dlock.ErrInvalid. The default is none: the key is the resource name.
func WithPrefix(prefix string) Option {
	return func(l *Locker) error { return l.cfg.SetPrefix(prefix) }
}

// WithDriftFactor sets the share of the TTL set aside for clock drift: the
// validity's margin is ttl × f + 2ms (Redis's 1ms expiry precision and a
// 1ms floor), as in antirez's reference implementation. f must be in
// [0, 1); the default is 0.01.
func WithDriftFactor(f float64) Option {
	return func(l *Locker) error { return l.cfg.SetDriftFactor(f) }
}

// WithLogger sets where the Locker logs its events (see Events in package
// dlock) and configuration warnings. The default is slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) error { return l.cfg.SetLogger(logger) }
}

// WithObserver adds an observer of the Locker's attempts and locks (see
// Events in package dlock). The default is none beside the logger's.
func WithObserver(observe func(ctx context.Context, e dlock.Event)) Option {
	return func(l *Locker) error { return l.cfg.AddObserver(observe) }
}

// WithFenceTTL sets how long a key's fence counter ("dlock:fence:{key}")
// outlives its last grant or extension. An expired counter comes back
// from the server's clock, above every fence it handed out unless that
// clock stepped back since by more than d (see Fences in the package
// documentation): d only bounds how long the server keeps one small key
// per lock name. The default is 1h.
func WithFenceTTL(d time.Duration) Option {
	return func(l *Locker) error { return l.cfg.SetFenceTTL(d, time.Millisecond) }
}

// WithHolderInfo makes the Locker publish who holds each of its locks, for
// Inspect, `dlock inspect` and dlock.Leader: a JSON record {"host", "pid",
// "service", "since", "token"} (the grant's token tells it from a record
// an earlier holder left) in "dlock:holder:{key}", written with the grant,
// given the lock's TTL at each extension, and deleted with the release
// where it is still this lock's. It is informational only: the lock key
// and its token decide who holds the lock. service names the program (it
// may be empty). The default is off. Its cost: one more key, written,
// renewed and deleted by the lock's own scripts in the same round trips
// (bench/RESULTS.md, Hook).
func WithHolderInfo(service string) Option {
	return func(l *Locker) error { return l.cfg.SetHolderInfo(service) }
}
