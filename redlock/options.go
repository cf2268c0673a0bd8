package redlock

import (
	"context"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

// Option configures a Locker.
type Option func(*Locker) error

const defaultNodeTimeout = 50 * time.Millisecond

// WithDriftFactor sets the share of the TTL set aside for clock drift,
// node-redlock's driftFactor: the validity's margin is ttl × f + 2ms
// (Redis's 1ms expiry precision and a 1ms floor), as in antirez's
// reference implementation. f must be in [0, 1); the default is 0.01.
func WithDriftFactor(f float64) Option {
	return func(l *Locker) error { return l.cfg.SetDriftFactor(f) }
}

// WithNodeTimeout bounds each request to one node, so that a dead or frozen
// node costs at most d. Keep it small against the TTL (the Redis
// documentation suggests 5-50ms for a 10s TTL): each round of an
// acquisition may take up to d, all of it taken from the validity. A TTL
// too short for it cuts it to the TTL minus the drift margin. The default
// is 50ms.
func WithNodeTimeout(d time.Duration) Option {
	return func(l *Locker) error {
		if d <= 0 {
			return bridge.Invalidf("node timeout %v: must be positive", d)
		}
		l.nodeTimeout = d
		return nil
	}
}

// WithPrefix prepends prefix to every lock key, e.g. "locks:"; handles
// report the key without it. The default is none: the key is the resource
// name, as in node-redlock.
func WithPrefix(prefix string) Option {
	return func(l *Locker) error { return l.cfg.SetPrefix(prefix) }
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

// WithHolderInfo makes the Locker publish who holds each of its locks, for
// Inspect, `dlock inspect` and dlock.Leader: redislock's holder record (see
// its WithHolderInfo) on each node that granted, kept and deleted with the
// lock there as redislock does, also by a failed attempt's undo;
// ReleaseToken and ExtendToken leave it to expire with its TTL. It is
// informational only: the lock keys and their token decide who holds the
// lock. service names the program (it may be empty). The default is off.
// Its cost: one more key per node, written, renewed and deleted by the
// lock's own scripts in the same round trips (bench/RESULTS.md, Hook).
func WithHolderInfo(service string) Option {
	return func(l *Locker) error { return l.cfg.SetHolderInfo(service) }
}

// WithStrict turns the configuration warnings (even N, N < 3, duplicate
// nodes) into errors matching dlock.ErrInvalid: from New for what it can
// see, from TryAcquire for servers found to be the same by their run_id
// (read with each node's first attempt). The default is false: warn and go
// on (a duplicate server then votes once).
func WithStrict(strict bool) Option {
	return func(l *Locker) error {
		l.strict = strict
		return nil
	}
}

// WithFenceTTL sets how long a key's fence counter on each node
// ("dlock:fence:{key}") outlives the last grant, extension or release that
// wrote it. An expired counter comes back from the node's clock, so d is
// part of the fence rule's clock assumption (D in the package doc), and
// releases and extensions by token that do not hear from every node raise
// the counters by d. d must be at least 500ms, below which NTP over a
// network keeps no margin; the default is 1h.
func WithFenceTTL(d time.Duration) Option {
	return func(l *Locker) error { return l.cfg.SetFenceTTL(d, 500*time.Millisecond) }
}
