package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Candidate is a campaign for one election that runs in the background,
// for code that asks "am I the leader?" from elsewhere: HTTP handlers,
// schedulers. Campaign starts it; it leads as Lead does (campaigning again
// after a loss unless WithRecampaign(false)) until Resign or the end of
// Campaign's context. Its methods are safe for concurrent use.
//
// Its IsLeader method makes it a gocron v2 Elector with no import:
//
//	c, err := dlock.Campaign(ctx, locker, "scheduler", 15*time.Second)
//	if err != nil { ... }
//	defer c.Resign(context.Background())
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(c))
type Candidate struct {
	name   string
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the campaign has ended
	err    error         // what the campaign returned, set before done is closed

	mu       sync.Mutex
	lock     *Lock // the current term's, while the candidate leads
	term     Term
	resigned bool // Resign was called
}

var errResigned = errors.New("resigned")

// Campaign starts a Candidate for the election name on l, campaigning in
// the background as Lead does, with the same options. It returns an error
// matching ErrInvalid for bad arguments, before anything is sent. The
// campaign holds a goroutine until Resign is called or ctx ends.
func Campaign(ctx context.Context, l Locker, name string, ttl time.Duration, opts ...Option) (*Candidate, error) {
	cfg, err := leadConfig(ctx, l, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	c := &Candidate{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = lead(cctx, l, name, ttl, &cfg, c.serve)
	}()
	return c, nil
}

// serve publishes the term while the candidate leads.
func (c *Candidate) serve(ctx context.Context) error {
	t, _ := TermFromContext(ctx)
	c.mu.Lock()
	if !c.resigned {
		c.lock, c.term = LockFromContext(ctx), t
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.lock = nil
	c.mu.Unlock()
	return nil
}

// IsLeader returns nil while the candidate leads and its leadership is
// within its validity, as measured on this process's monotonic clock (it
// asks no server). Otherwise it returns an error matching ErrNotAcquired
// that says why (campaigning, resigned, the campaign ended), or, when the
// campaign ended with an error that waiting could not change (ErrInvalid:
// a backend refused the arguments), that error. ctx is not used: it is
// there for gocron's Elector interface.
func (c *Candidate) IsLeader(ctx context.Context) error {
	c.mu.Lock()
	lock, resigned := c.lock, c.resigned
	c.mu.Unlock()
	if lock != nil && lock.Held() {
		return nil
	}
	select {
	case <-c.done:
	default:
		return fmt.Errorf("dlock: not the leader of %q: %w (campaigning)", c.name, ErrNotAcquired)
	}
	err := c.err // set before done was closed
	switch {
	case resigned:
		return fmt.Errorf("dlock: not the leader of %q: %w (resigned)", c.name, ErrNotAcquired)
	case err == nil:
		return fmt.Errorf("dlock: not the leader of %q: %w (the campaign ended)", c.name, ErrNotAcquired)
	case !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld):
		return err
	}
	return fmt.Errorf("dlock: not the leader of %q: %w (the campaign ended: %w)", c.name, ErrNotAcquired, hideSentinels{err})
}

// Term returns the candidate's term and true while IsLeader would return
// nil, and a Term naming only the election and false otherwise.
func (c *Candidate) Term() (Term, bool) {
	c.mu.Lock()
	lock, t := c.lock, c.term
	c.mu.Unlock()
	if lock != nil && lock.Held() {
		return t, true
	}
	return Term{Name: c.name}, false
}

// Resign ends the campaign: a leading candidate stops leading (IsLeader
// fails from the call on) and releases its lock, waking the next
// candidate; a candidate still campaigning stops waiting. It returns when
// the campaign has ended: nil, the release's error (ErrUnavailable when
// its outcome is unknown: the lock lapses with its TTL; ErrNotHeld when it
// had lapsed already), or the loss when the leadership was lost as it
// resigned (ErrLockLost). When ctx ends first it returns an error matching
// ErrUnavailable and ctx.Err(), the campaign ending in the background.
// Resign may be called more than once.
func (c *Candidate) Resign(ctx context.Context) error {
	c.mu.Lock()
	c.resigned, c.lock = true, nil
	c.mu.Unlock()
	c.cancel(errResigned)
	select {
	case <-c.done:
	case <-ctx.Done():
		return fmt.Errorf("dlock: resign %q: %w: %w", c.name, ErrUnavailable, ctxErr(ctx))
	}
	if errors.Is(c.err, context.Canceled) || errors.Is(c.err, ErrNotAcquired) {
		return nil // it was campaigning: nothing to release
	}
	return c.err
}
