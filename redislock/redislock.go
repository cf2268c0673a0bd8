package redislock

import (
	"cmp"
	"context"
	"fmt"
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
	l.node = rnode.New(client, rclient.Name(client), l.cfg.FenceTTL, l.cfg.Logger)
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

// TryAcquire implements dlock.Locker, in one round trip. An error reply
// that may pass matches dlock.ErrUnavailable, a refusal for good
// dlock.ErrMisconfigured (the reply is in the chain: errors.As with
// redis.Error). An attempt that returns an error leaves no key of its own
// behind: one whose reply was lost is deleted again (best effort, in the
// background).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return l.cfg.Events.Attempt(ctx, key, func() (*dlock.Lock, error) { return l.tryAcquire(ctx, key, ttl) })
}

func (l *Locker) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := l.cfg.Check(ctx, key, ttl); err != nil {
		return nil, err
	}
	a, err := l.begin(key, l.cfg.Prefix+key, ttl)
	if err != nil {
		return nil, err
	}
	rec := holder.Grant(l.cfg.HolderHead, time.Now(), driver.Identity(ctx), a.token) // "": none
	g := &grant{l: l, keys: [1]string{a.full}, token: a.token, holder: rec}
	at := rnode.Attempt{Keys: g.keys[:], Token: a.token, TTL: ttl, Holder: g.holder, Late: (*giveBack)(l)}
	at.Queue, at.QueueArgs = a.plan.Queue(0)
	a.start = time.Now()
	tctx, cancel := l.oneTry(ctx)
	r, boxed, err := l.node.Acquire(tctx, at)
	cancel()
	if err != nil {
		return nil, a.failed(ctx, err, g.keys[:])
	}
	validUntil, err := a.answered(ctx, r, "held by another owner", a.full)
	if err != nil {
		return nil, err
	}
	g.fence, g.boxed = r.Fence, boxed
	return driver.NewLock(key, a.token, uint64(r.Fence), validUntil, g), nil
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

// giveBack is the Locker as an rnode.GiveBacker: it deletes whichever of
// keys holds token, in the background, within a short bound, waking
// nobody: the lock was never held. (A holder record expires with the
// lock's TTL.)
type giveBack Locker

func (l *giveBack) GiveBack(ctx context.Context, _ *rnode.Node, keys []string, token string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 500*time.Millisecond))
	go func() {
		defer cancel()
		_, _, _ = l.node.Release(ctx, rnode.Release{Keys: keys, Token: token, NoProbe: true})
	}()
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

// attempt is one try at a lock or a permit.
type attempt struct {
	l     *Locker
	name  string // as the caller gave it
	full  string // the key, or a permit's semaphore (semKey), with the prefix
	token string
	ttl   time.Duration
	plan  *wake.Plan // nil while no local Acquire waits: no queueing
	start time.Time  // when the request left
}

// begin starts an attempt on name, or refuses it (wake.Plan's yield).
func (l *Locker) begin(name, full string, ttl time.Duration) (attempt, error) {
	plan, yield := l.notify.Plan(full)
	if yield {
		return attempt{}, fmt.Errorf("dlock: acquire %q: %w (this Locker's release just woke the longest waiter, which goes first)", name, dlock.ErrNotAcquired)
	}
	return attempt{l: l, name: name, full: full, token: bridge.NewToken(), ttl: ttl, plan: plan}, nil
}

// failed returns the error of an attempt whose call failed with err.
// Unless it left its batch (Late gives it back) or the server answered
// with an error, the reply was lost, not the request: one of keys may be
// ours, so it is removed.
func (a *attempt) failed(ctx context.Context, err error, keys []string) error {
	a.plan.Lost(0)
	if _, left := err.(*batch.LeftError); !left && !rclient.IsReply(err) {
		(*giveBack)(a.l).GiveBack(ctx, nil, keys, a.token, a.ttl)
	}
	return fmt.Errorf("dlock: acquire %q: %w", a.name, a.l.opErr(ctx, err, true))
}

// answered records the server's answer r in the attempt's plan and returns
// the grant's validity, or the refusal's error (busy says who holds the
// key). A grant of key with no validity left is given back.
func (a *attempt) answered(ctx context.Context, r rnode.AcquireResult, busy, key string) (time.Time, error) {
	a.plan.Observe(0, r.Status != rnode.Granted, r.Place, r.Expiry)
	why := busy
	switch r.Status {
	case rnode.Granted:
		validUntil := bridge.ValidUntil(a.start, a.ttl, a.l.cfg.DriftFactor)
		elapsed := time.Since(a.start)
		if validUntil.After(a.start.Add(elapsed)) {
			return validUntil, nil
		}
		(*giveBack)(a.l).GiveBack(ctx, nil, []string{key}, a.token, a.ttl)
		why = fmt.Sprintf("the acquisition took %v, no validity left of ttl %v", elapsed, a.ttl)
	case rnode.LeftToQueue:
		why = "free, but this Locker's release just woke the longest waiter, which goes first"
	case rnode.NoExpiry:
		why += ", and the key has no expiry: was it set by hand?"
	case rnode.Widen:
		why = "the limit changed while this attempt read the semaphore"
	}
	return time.Time{}, fmt.Errorf("dlock: acquire %q: %w (%s)", a.name, dlock.ErrNotAcquired, why)
}
