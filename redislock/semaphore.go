package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/bridge"
)

var _ driver.Semaphores = (*Locker)(nil)

// Semaphore implements driver.Semaphores (see dlock.Semaphore): its
// TryAcquire grants one of limit permits of name in one round trip (see
// Semaphores in the package documentation).
func (l *Locker) Semaphore(limit int) dlock.Locker { return semaphore{l, limit} }

type semaphore struct {
	l     *Locker
	limit int
}

var _ driver.ReleaseNotifier = semaphore{}

func (s semaphore) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	return s.l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) {
		if err := s.l.cfg.CheckPermit(ctx, name, ttl, s.limit); err != nil {
			return nil, err
		}
		return s.l.acquire(ctx, name, s.l.semKey(name), ttl, s.limit)
	})
}

// NotifyRelease implements driver.ReleaseNotifier: a release of any
// permit of name wakes the head of the semaphore's queue.
func (s semaphore) NotifyRelease(_ context.Context, name string) (<-chan struct{}, func()) {
	return s.l.register(name, s.l.semKey(name))
}

// semKey is the semaphore's name on the server: its slot keys' prefix.
func (l *Locker) semKey(name string) string { return l.cfg.Prefix + bridge.SlotPrefix(name) }

// SetLimit implements driver.Semaphores (see dlock.SetLimit): one script
// that records limit beside name's slots while a permit is held.
func (l *Locker) SetLimit(ctx context.Context, name string, limit int) error {
	if err := l.cfg.CheckLimit(ctx, name, limit); err != nil {
		return err
	}
	tctx, cancel := l.oneTry(ctx)
	defer cancel()
	if _, err := l.node.SetLimit(tctx, l.semKey(name), limit); err != nil {
		return fmt.Errorf("dlock: set limit of %q: %w", name, l.opErr(ctx, err, false))
	}
	return nil
}
