package redlock

import (
	"context"
	"errors"
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
// TryAcquire tries the slots of name in order, each a Redlock round of its
// own, until a majority grants one (see Semaphores in the package
// documentation).
func (l *Locker) Semaphore(limit int) dlock.Locker { return semaphore{l, limit} }

// semaphore is the Locker of Semaphore.
type semaphore struct {
	l     *Locker
	limit int
}

var _ driver.ReleaseNotifier = semaphore{}

func (s semaphore) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	return s.l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) { return s.try(ctx, name, ttl) })
}

// NotifyRelease implements driver.ReleaseNotifier: a release of any permit
// of name wakes the semaphore's longest waiter, as a lock's release does.
func (s semaphore) NotifyRelease(_ context.Context, name string) (<-chan struct{}, func()) {
	if bridge.CheckKey(name) != nil {
		return nil, func() {}
	}
	return s.l.notify.Register(s.l.cfg.Prefix + bridge.SlotPrefix(name))
}

func (s semaphore) try(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	l := s.l
	if err := l.cfg.CheckPermit(ctx, name, ttl, s.limit); err != nil {
		return nil, err
	}
	full, plan, err := l.prepare(ctx, []string{bridge.SlotPrefix(name)}, name, ttl)
	if err != nil {
		return nil, err
	}
	for slot := range s.limit {
		t := &try{Attempt: rnode.Attempt{Keys: []string{full[0] + strconv.Itoa(slot)}, Token: bridge.NewToken(), TTL: ttl,
			Sem: full[0], Slot: slot, Limit: s.limit}, display: name, plan: plan}
		g, validUntil, err := l.acquireMajority(ctx, t)
		if err == nil {
			return driver.NewPermit(name, slot, t.Token, uint64(g.fence), validUntil, g), nil
		}
		if !errors.Is(err, dlock.ErrNotAcquired) || ctx.Err() != nil {
			return nil, err // a conflict, unreachable nodes, or cut short: the next slot would be too
		}
	}
	return nil, fmt.Errorf("dlock: acquire %q: %w (all %d permits are held)", name, dlock.ErrNotAcquired, s.limit)
}

// conflict returns the error of a permit's attempt that so many nodes
// refused for another recorded limit that no majority is left, after
// releasing it everywhere; nil when they were fewer (a minority's stale
// record blocks nobody).
func (l *Locker) conflict(ctx context.Context, t *try, replies []*nodeReply) error {
	if t.Sem == "" {
		return nil
	}
	n, server := 0, int64(0)
	for _, r := range replies {
		if r.err == nil && r.Status == rnode.Conflict {
			n, server = n+1, r.Fence
		}
	}
	if !l.tooMany(n) {
		return nil
	}
	l.releaseEverywhere(ctx, t)
	return backend.LimitConflict(t.display, int(server), t.Limit)
}

// errNoSlot is SetLimit's answer from a node that holds no slot of the
// semaphore, so there is no limit to change.
var errNoSlot = errors.New("holds no slot of the semaphore: nothing to change")

// SetLimit implements driver.Semaphores (see dlock.SetLimit): it records
// limit on every node where a slot of name is held, and succeeds when a
// majority did, or when so many nodes hold no slot that no permit can be
// held. It returns an error matching dlock.ErrUnavailable, with a
// *QuorumError, otherwise.
func (l *Locker) SetLimit(ctx context.Context, name string, limit int) error {
	if err := l.cfg.CheckLimit(ctx, name, limit); err != nil {
		return err
	}
	sem := l.cfg.Prefix + bridge.SlotPrefix(name)
	res := vote(ctx, l, sending{timeout: l.nodeTimeout}, func(ctx context.Context, _ int, n *node) error {
		recorded, err := n.SetLimit(ctx, sem, limit)
		switch {
		case err != nil:
			return l.nodeErr(err, l.nodeTimeout)
		case !recorded:
			return errNoSlot
		}
		return nil
	}).all()
	qe, empty := l.tally("set limit", res, nil, errNoSlot)
	if qe.Got >= l.quorum || l.tooMany(empty) {
		return nil
	}
	qe.Reason = "too few nodes recorded the limit"
	l.misconfigured(qe)
	return fmt.Errorf("dlock: set limit of %q: %w", name, l.withCtx(ctx, qe))
}
