package redislock

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/holder"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rnode"
	"github.com/dlock-go/dlock/internal/wake"
)

// Locker takes locks on one Redis deployment (a single node, a Sentinel group
// or a Cluster) through a go-redis client. It is safe for concurrent use;
// create one per client and share it.
type Locker struct {
	node       *rnode.Node    // the protocol on the deployment, run inline
	cfg        backend.Config // the options every backend shares
	notify     *wake.Notifier // nil for clients without usable pub/sub (a Ring)
	tryTimeout time.Duration  // the bound of one try (rclient.Timeouts; 0: none)
}

var (
	_ dlock.Locker           = (*Locker)(nil)
	_ driver.ReleaseNotifier = (*Locker)(nil)
)

// New returns a Locker over client. It sends nothing to the server.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if nodeerr.IsNil(client) {
		return nil, bridge.Invalidf("nil redis client")
	}
	tryTimeout, bound := rclient.Timeouts(client)
	l := &Locker{cfg: backend.New(backend.FenceTTL, true), tryTimeout: tryTimeout}
	if err := backend.Apply(l, opts); err != nil {
		return nil, err
	}
	l.node = rnode.New(client, rclient.Name(client), l.cfg.FenceTTL, giveBackWithin, l.cfg.Logger)
	if _, ring := client.(*redis.Ring); !ring {
		l.notify = wake.New([]redis.UniversalClient{client})
	}
	if !bound {
		l.cfg.Logger.Warn("dlock: the redis client ignores context deadlines (ContextTimeoutEnabled is false): a call to a server that does not answer returns only after ReadTimeout",
			"node", l.node.Name)
	}
	l.cfg.Done("redis")
	return l, nil
}

// giveBackWithin bounds the background deletion of a key granted to an
// attempt that returned an error (and by the key's TTL).
const giveBackWithin = 500 * time.Millisecond

// TryAcquire implements dlock.Locker, in one round trip. An error reply
// that may pass matches dlock.ErrUnavailable, a refusal for good
// dlock.ErrMisconfigured (the reply is in the chain: errors.As with
// redis.Error). An attempt that returns an error leaves no key of its own
// behind: one whose reply was lost is deleted again (best effort, in the
// background).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return l.cfg.Events.Attempt(ctx, key, func() (*dlock.Lock, error) {
		if err := l.cfg.Check(ctx, key, ttl); err != nil {
			return nil, err
		}
		return l.acquire(ctx, key, l.cfg.Prefix+key, ttl, 0)
	})
}

// acquire is one try at the lock on name, whose key is full, or, with a
// limit, at a permit of the semaphore full (semKey).
func (l *Locker) acquire(ctx context.Context, name, full string, ttl time.Duration, limit int) (*dlock.Lock, error) {
	plan, yield := l.notify.Plan(full)
	if yield {
		return nil, fmt.Errorf("dlock: acquire %q: %w (this Locker's release just woke the longest waiter, which goes first)", name, dlock.ErrNotAcquired)
	}
	token := bridge.NewToken()
	g := &grant{l: l, keys: [1]string{full}, token: token}
	at := rnode.Attempt{Keys: g.keys[:], Token: token, TTL: ttl}
	at.Queue, at.QueueArgs = plan.Queue(0)
	if limit > 0 {
		at.Sem, at.Limit, at.Slot, g.sem = full, limit, -1, full
	} else {
		at.Holder = holder.Term(l.cfg.HolderHead, time.Now(), driver.Identity(ctx), token, 0)
		g.holder = at.Holder
	}
	tctx, cancel := l.oneTry(ctx)
	start := time.Now()
	var r rnode.AcquireResult
	var err error
	if limit > 0 {
		r, at.Keys, err = l.node.Permit(tctx, at) // the slots, one of which may be ours after an error
	} else {
		r, g.boxed, err = l.node.Acquire(tctx, at)
	}
	cancel()
	if err != nil {
		plan.Lost(0)
		// Unless the call left its batch (the node gives it back) or the
		// server answered with an error, the reply was lost, not the request.
		if _, left := err.(*batch.LeftError); !left && !rclient.IsReply(err) {
			l.node.GiveBack(ctx, at.Keys, token, ttl)
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w", name, l.opErr(ctx, err, true))
	}
	plan.Observe(0, r.Status != rnode.Granted, r.Place, r.Expiry)
	return g.answered(ctx, name, r, start, ttl, limit)
}

// answered returns the lock (or permit) the server's answer r granted, or
// the refusal's error. A grant with no validity left is given back.
func (g *grant) answered(ctx context.Context, name string, r rnode.AcquireResult,
	start time.Time, ttl time.Duration, limit int) (*dlock.Lock, error) {
	why := "held by another owner"
	if limit > 0 {
		why = "all permits are held"
	}
	switch r.Status {
	case rnode.Granted:
		if limit > 0 {
			g.keys[0] += strconv.FormatInt(r.Slot, 10)
		}
		validUntil := bridge.ValidUntil(start, ttl, g.l.cfg.DriftFactor)
		elapsed := time.Since(start)
		if !validUntil.After(start.Add(elapsed)) {
			g.l.node.GiveBack(ctx, g.keys[:], g.token, ttl)
			why = fmt.Sprintf("the acquisition took %v, no validity left of ttl %v", elapsed, ttl)
			break
		}
		g.fence = r.Fence
		if limit > 0 {
			return driver.NewPermit(name, int(r.Slot), g.token, uint64(r.Fence), validUntil, g), nil
		}
		return driver.NewLock(name, g.token, uint64(r.Fence), validUntil, g), nil
	case rnode.Conflict:
		return nil, backend.LimitConflict(name, int(r.Fence), limit)
	case rnode.LeftToQueue:
		why = "free, but this Locker's release just woke the longest waiter, which goes first"
	case rnode.NoExpiry:
		why += ", and the key has no expiry: was it set by hand?"
	case rnode.Widen:
		why = "the limit changed while this attempt read the semaphore"
	}
	return nil, fmt.Errorf("dlock: acquire %q: %w (%s)", name, dlock.ErrNotAcquired, why)
}

// NotifyRelease implements driver.ReleaseNotifier. It sends nothing: the
// Locker subscribes when a waiting attempt first finds a key busy. On a
// Ring (no usable pub/sub) and after Close the channel never fires.
func (l *Locker) NotifyRelease(_ context.Context, key string) (released <-chan struct{}, stop func()) {
	return l.register(key, l.cfg.Prefix+key)
}

// register waits for the release of full: the lock key, or the semaphore,
// of name.
func (l *Locker) register(name, full string) (<-chan struct{}, func()) {
	if l.notify == nil || bridge.CheckKey(name) != nil {
		return nil, func() {}
	}
	return l.notify.Register(full)
}

// Close ends the Locker's subscription to release announcements (else
// closed with the client, or after 30s without waiters) and takes it out
// of its waiter queues; waits then poll, and everything else keeps
// working. It does not close the client, is safe to call more than once
// and concurrently with other methods, and returns nil.
func (l *Locker) Close() error {
	if l.notify != nil {
		l.notify.Close()
	}
	return nil
}

// ReleaseToken releases the lock on key if it still holds token. It is for
// holders that kept only the token, such as shell scripts using `dlock
// acquire`; code with a *dlock.Lock should call its Release. It returns an
// error matching dlock.ErrNotHeld when key does not hold token.
func (l *Locker) ReleaseToken(ctx context.Context, key, token string) error {
	if err := l.cfg.CheckToken(ctx, key, token); err != nil {
		return err
	}
	g := &grant{l: l, keys: [1]string{l.cfg.Prefix + key}, token: token}
	if err := g.Release(ctx); err != nil {
		return fmt.Errorf("dlock: release %q: %w", key, err)
	}
	return nil
}

// ExtendToken resets the TTL of the lock on key if it still holds token (see
// ReleaseToken for when to use it). It returns an error matching
// dlock.ErrNotHeld when key does not hold token.
func (l *Locker) ExtendToken(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := l.cfg.CheckToken(ctx, key, token); err != nil {
		return err
	}
	g := &grant{l: l, keys: [1]string{l.cfg.Prefix + key}, token: token}
	if _, err := g.Extend(ctx, ttl); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", key, err)
	}
	return nil
}

// grant is one held lock's connection to the server.
type grant struct {
	l      *Locker
	keys   [1]string // the key with the prefix (an array: no allocation for a slice of it)
	token  string
	fence  int64       // 0 for a lock known only by its token
	holder string      // the holder record written at the grant (WithHolderInfo)
	sem    string      // a permit's semaphore (semKey), "" for a lock
	boxed  rnode.Boxed // the key and token as the attempt boxed them, for the release
}

func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if err := g.l.cfg.CheckTTL(ttl); err != nil {
		return time.Time{}, err
	}
	tctx, cancel := g.l.oneTry(ctx)
	defer cancel()
	start := time.Now()
	held, err := g.l.node.Extend(tctx, g.keys[:], g.token, g.holder, g.sem, g.fence, ttl)
	if err != nil {
		return time.Time{}, g.l.opErr(ctx, err, false)
	}
	if !held {
		return time.Time{}, fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	return bridge.ValidUntil(start, ttl, g.l.cfg.DriftFactor), nil
}

func (g *grant) Release(ctx context.Context) error {
	tctx, cancel := g.l.oneTry(ctx)
	defer cancel()
	n, woken, err := g.l.node.Release(tctx, rnode.Release{Keys: g.keys[:], Token: g.token, Boxed: g.boxed, Holder: g.holder, Wake: true, Sem: g.sem})
	if err != nil {
		return g.l.opErr(ctx, err, false)
	}
	if woken > 0 && g.l.notify != nil {
		g.l.notify.Woke(cmp.Or(g.sem, g.keys[0])) // a permit's release announces its semaphore
	}
	if n == 0 {
		return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	return nil
}

func (l *Locker) opErr(ctx context.Context, err error, acquiring bool) error {
	return nodeerr.Error(ctx, l.node.Name, err, rclient.Kind(err), acquiring)
}

// oneTry bounds one try (see the package documentation).
func (l *Locker) oneTry(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.tryTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.tryTimeout)
}
