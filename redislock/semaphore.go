package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/rnode"
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
	return s.l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) { return s.try(ctx, name, ttl) })
}

// NotifyRelease implements driver.ReleaseNotifier: a release of any
// permit of name wakes the head of the semaphore's queue.
func (s semaphore) NotifyRelease(_ context.Context, name string) (<-chan struct{}, func()) {
	return s.l.register(name, s.l.semKey(name))
}

// semKey is the semaphore's name on the server: its slot keys' prefix.
func (l *Locker) semKey(name string) string { return l.cfg.Prefix + bridge.SlotPrefix(name) }

func (s semaphore) try(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	l := s.l
	if err := l.cfg.CheckPermit(ctx, name, ttl, s.limit); err != nil {
		return nil, err
	}
	a, err := l.begin(name, l.semKey(name), ttl)
	if err != nil {
		return nil, err
	}
	_, queue := a.plan.Queue(0)
	p := rnode.Attempt{Sem: a.full, Limit: s.limit, Slot: -1, Token: a.token, TTL: ttl, QueueArgs: queue,
		Late: (*giveBack)(l)}
	tctx, cancel := l.oneTry(ctx)
	defer cancel()
	a.start = time.Now()
	r, slots, err := l.node.Permit(tctx, p)
	if err != nil {
		return nil, a.failed(ctx, err, slots) // a slot may be ours
	}
	slot := a.full + strconv.FormatInt(r.Slot, 10)
	validUntil, err := a.answered(ctx, r, "all permits are held", slot)
	if r.Status == rnode.Conflict {
		return nil, backend.LimitConflict(name, int(r.Fence), s.limit)
	}
	if err != nil {
		return nil, err
	}
	g := &grant{l: l, keys: [1]string{slot}, token: a.token, fence: r.Fence, sem: a.full}
	return driver.NewPermit(name, int(r.Slot), a.token, uint64(r.Fence), validUntil, g), nil
}

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
