package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rnode"
)

var _ driver.Semaphores = (*Locker)(nil)

// Semaphore implements driver.Semaphores (see dlock.Semaphore): its
// TryAcquire grants one of limit permits of name in one round trip, a
// script that looks at every slot key ({name}#0 to {name}#(limit-1), one
// Cluster slot by their hash tag), checks the limit recorded beside them,
// and sets the lowest free slot to a fresh token with the TTL. Expiry is
// the server's alone. See Semaphores in the package documentation.
func (l *Locker) Semaphore(limit int) dlock.Locker { return semaphore{l, limit} }

// semaphore is the Locker of Semaphore.
type semaphore struct {
	l     *Locker
	limit int
}

var _ driver.ReleaseNotifier = semaphore{}

func (s semaphore) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	a := s.l.cfg.Events.Attempt(ctx, name)
	return a.End(s.try(ctx, name, ttl))
}

// NotifyRelease implements driver.ReleaseNotifier: a release of any
// permit of name wakes the Locker's waiter that heads the semaphore's
// queue, as a lock's release does (see Locker.NotifyRelease).
func (s semaphore) NotifyRelease(_ context.Context, name string) (<-chan struct{}, func()) {
	l := s.l
	if l.notify == nil || driver.CheckKey(name) != nil {
		return nil, func() {}
	}
	return l.notify.Register(l.semKey(name))
}

// semKey is what the keys of name's slots begin with, prefix included:
// the semaphore's name on the server, for its queue and limit record.
func (l *Locker) semKey(name string) string { return l.cfg.Prefix + bridge.SlotPrefix(name) }

func (s semaphore) try(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	l := s.l
	if err := l.cfg.CheckPermit(ctx, name, ttl, s.limit); err != nil {
		return nil, err
	}
	sem, token := l.semKey(name), driver.NewToken()
	plan, err := l.plan(name, sem)
	if err != nil {
		return nil, err
	}
	args := []any{token, driver.Milliseconds(ttl), l.cfg.FenceTTL.Milliseconds(), s.limit}
	_, queue := plan.Queue(0)
	args = append(args, queue...)
	n := s.limit
	tctx, cancel := l.oneTry(ctx)
	defer cancel()
	start := time.Now()
	for range 2 { // a second time with every slot that may be held (Widen)
		v, err := l.node.Run(tctx, rnode.SemaphoreScript, rnode.SemaphoreKeys(sem, n), args).Result()
		if err != nil {
			plan.Lost(0)
			if _, left := err.(*batch.LeftError); !left && !rclient.IsReply(err) {
				l.semCleanup(ctx, sem, n, token, ttl) // the reply was lost: a slot may be ours
			}
			return nil, fmt.Errorf("dlock: acquire %q: %w", name, l.opErr(ctx, err, true))
		}
		r, err := rnode.SemaphoreReply(v)
		if err != nil {
			plan.Lost(0)
			l.semCleanup(ctx, sem, n, token, ttl)
			return nil, fmt.Errorf("dlock: acquire %q: %w: %w", name, dlock.ErrUnavailable, &dlock.NodeError{Node: l.node.Name, Err: err})
		}
		if r.Status == rnode.Widen && r.X > int64(n) && r.X <= driver.MaxLimit {
			n = int(r.X)
			continue
		}
		plan.Observe(0, r.Status != rnode.Granted, r.Place, r.Expiry)
		if r.Status == rnode.Conflict {
			return nil, driver.LimitConflict(name, int(r.X), s.limit)
		}
		return l.permit(ctx, name, sem, token, ttl, start, r)
	}
	return nil, fmt.Errorf("dlock: acquire %q: %w (the limit changed while this attempt read the semaphore)", name, dlock.ErrNotAcquired)
}

// permit turns the semaphore script's answer into a permit or an error.
func (l *Locker) permit(ctx context.Context, name, sem, token string, ttl time.Duration, start time.Time, r rnode.SemaphoreResult) (*dlock.Lock, error) {
	switch r.Status {
	case rnode.Busy:
		return nil, fmt.Errorf("dlock: acquire %q: %w (all permits are held)", name, dlock.ErrNotAcquired)
	case rnode.LeftToQueue:
		return nil, fmt.Errorf("dlock: acquire %q: %w (a permit is free, but this Locker's release just woke the longest waiter, which goes first)", name, dlock.ErrNotAcquired)
	case rnode.Granted:
	default:
		return nil, fmt.Errorf("dlock: acquire %q: %w (the limit changed while this attempt read the semaphore)", name, dlock.ErrNotAcquired)
	}
	slot := int(r.Slot)
	key := sem + fmt.Sprint(slot)
	validUntil := driver.ValidUntil(start, ttl, l.cfg.DriftFactor)
	if elapsed := time.Since(start); !validUntil.After(start.Add(elapsed)) {
		l.cleanup(ctx, key, token, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, no validity left of ttl %v)", name, dlock.ErrNotAcquired, elapsed, ttl)
	}
	g := &grant{l: l, keys: [1]string{key}, token: token, fence: r.X, sem: sem}
	return driver.NewPermit(name, slot, token, uint64(r.X), validUntil, g), nil
}

// semCleanup deletes whichever of sem's first n slots holds token, in the
// background (see cleanup).
func (l *Locker) semCleanup(ctx context.Context, sem string, n int, token string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 500*time.Millisecond))
	go func() {
		defer cancel()
		_ = l.node.Run(ctx, rnode.ReleaseScript, rnode.SemaphoreKeys(sem, n)[2:2+n], []any{token, n}).Err()
	}()
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
