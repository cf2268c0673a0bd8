package etcdlock

import (
	"log/slog"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/keys"
)

// Option configures a Locker.
type Option func(*Locker) error

// WithPrefix prepends prefix to every lock name: the lock on key lives under
// prefix+key+"/". The default is no prefix, so the name is the one
// concurrency.NewMutex and `etcdctl lock` take. A prefix inside dlock's own
// namespace is rejected with dlock.ErrInvalid.
func WithPrefix(prefix string) Option {
	return func(l *Locker) error {
		if err := keys.CheckPrefix(prefix); err != nil {
			return err
		}
		l.prefix = prefix
		return nil
	}
}

// WithDriftFactor sets the share of the TTL set aside for clock drift when
// computing validity (see driver.Drift). It must be in [0, 1). The default is
// driver.DefaultDriftFactor (0.01).
func WithDriftFactor(f float64) Option {
	return func(l *Locker) error {
		if err := driver.CheckDriftFactor(f); err != nil {
			return err
		}
		l.driftFactor = f
		return nil
	}
}

// WithLogger sets the logger for warnings. The default is slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) error {
		if logger == nil {
			return driver.Invalidf("nil logger")
		}
		l.logger = logger
		return nil
	}
}
