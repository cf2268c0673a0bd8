package redislock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/wake"
)

// Locker takes locks on one Redis deployment (a single node, a Sentinel group
// or a Cluster) through a go-redis client. It is safe for concurrent use;
// create one per client and share it.
type Locker struct {
	client      redis.UniversalClient
	node        string         // how errors name the server
	cfg         backend.Config // the options every backend shares
	fenceTTLArg any            // cfg.FenceTTL in ms, boxed once: one allocation less per attempt
	notify      *wake.Notifier // nil for clients without usable pub/sub (a Ring)
	batch       *batch.Batcher // the scripts' sender on a single-node client, else nil
	clockOffset int64          // µs added to the server's clock for fences; tests only
	tryTimeout  time.Duration  // the bound of one try (rclient.TryTimeout; 0: none)

	probing  chan struct{}  // held by the probe in progress (cap 1)
	probedOK atomic.Bool    // probed: native is set
	native   rclient.Native // the server's own commands for release and extension
}

var (
	_ dlock.Locker           = (*Locker)(nil)
	_ driver.ReleaseNotifier = (*Locker)(nil)
)

// New returns a Locker over client. It sends nothing to the server; support
// for the Redis 8.4 commands is detected on first use.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if rclient.IsNil(client) {
		return nil, driver.Invalidf("nil redis client")
	}
	l := &Locker{client: client, node: rclient.Name(client), cfg: backend.New(DefaultFenceTTL, true),
		tryTimeout: rclient.TryTimeout(client), probing: make(chan struct{}, 1)}
	if err := backend.Apply(l, opts); err != nil {
		return nil, err
	}
	if _, ring := client.(*redis.Ring); !ring {
		l.notify = wake.New([]redis.UniversalClient{client})
	}
	l.batch = batch.For(client)
	if !rclient.ContextTimeouts(client) {
		l.cfg.Logger.Warn("dlock: the redis client ignores context deadlines (ContextTimeoutEnabled is false): a call to a server that does not answer returns only after ReadTimeout",
			"node", l.node)
	}
	l.fenceTTLArg = l.cfg.FenceTTL.Milliseconds()
	l.cfg.Done("redis")
	return l, nil
}

// TryAcquire makes one attempt to take the lock on key for ttl: one script
// that sets the key to a fresh token if it is free and draws the fence, in
// one round trip. It returns an error matching dlock.ErrNotAcquired when
// another owner holds key, dlock.ErrUnavailable when the server could not be
// reached or answered with an error that may pass, dlock.ErrMisconfigured
// when it refused for good (see the package documentation; the reply is in
// the chain of both: errors.As with redis.Error), and dlock.ErrInvalid for
// bad arguments. An attempt that
// returns an error leaves no key of its own behind: the script changes
// nothing when it fails, and a key set by an attempt whose reply was lost is
// deleted again (best effort, in the background).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	a := l.cfg.Events.Attempt(ctx, key)
	return a.End(l.tryAcquire(ctx, key, ttl))
}

func (l *Locker) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := l.cfg.Check(ctx, key, ttl); err != nil {
		return nil, err
	}
	full := l.cfg.Prefix + key
	token := driver.NewToken()
	var plan *wake.Plan
	if l.notify != nil {
		plan = l.notify.Plan(full) // a local Acquire waits: queue for a wake-up
	}
	if plan.YieldHere() {
		plan.Yielded()
		return nil, fmt.Errorf("dlock: acquire %q: %w (this Locker's release just woke the longest waiter, which goes first)", key, dlock.ErrNotAcquired)
	}
	ks := []string{full, keys.Fence(full)}
	args := []any{token, driver.Milliseconds(ttl), l.fenceTTLArg}
	q, qargs, queued := plan.Queue(0)
	if queued || l.clockOffset != 0 {
		args = append(args, l.clockOffset)
	}
	if queued {
		ks = append(ks, q)
		args = append(args, qargs...)
	}
	start := time.Now()
	v, holder, err := l.acquireScript(ctx, ks, args, token, ttl)
	if err != nil {
		plan.Lost(0) // it may have queued the Locker
		if _, left := err.(*batch.LeftError); !left && !rclient.IsReply(err) {
			// The reply was lost, not the request: the key may be ours
			// now. Remove it so it does not block others for a whole TTL.
			// (An attempt that left its batch was never sent, or is
			// cleaned up when its reply comes: acquireScript.)
			l.cleanup(ctx, full, token, ttl)
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, l.opErr(ctx, err, true))
	}
	r, err := scripts.AcquireReply(v)
	if err != nil {
		plan.Lost(0)
		l.cleanup(ctx, full, token, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w: %w", key, dlock.ErrUnavailable, &dlock.NodeError{Node: l.node, Err: err})
	}
	plan.Observe(0, r.Status != scripts.Granted, r.Place, r.Expiry)
	switch r.Status {
	case scripts.Busy:
		return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner)", key, dlock.ErrNotAcquired)
	case scripts.LeftToQueue:
		return nil, fmt.Errorf("dlock: acquire %q: %w (free, but this Locker's release just woke the longest waiter, which goes first)", key, dlock.ErrNotAcquired)
	case scripts.NoExpiry:
		return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner, and the key has no expiry: was it set by hand?)", key, dlock.ErrNotAcquired)
	}
	validUntil := driver.ValidUntil(start, ttl, l.cfg.DriftFactor)
	if elapsed := time.Since(start); !validUntil.After(start.Add(elapsed)) {
		l.cleanup(ctx, full, token, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, no validity left of ttl %v)", key, dlock.ErrNotAcquired, elapsed, ttl)
	}
	return driver.NewLock(key, token, uint64(r.Fence), validUntil, &grant{l: l, key: full, token: token, fence: r.Fence, holder: holder, tokenArg: args[:1:1]}), nil
}

// NotifyRelease implements driver.ReleaseNotifier: the channel receives a
// value when the lock on key may have been released, so a waiting Acquire
// retries at once instead of at its next poll. It sends nothing to the
// server; the Locker's subscription starts when a waiting attempt first
// finds a key busy. stop must be called exactly once. On clients without
// usable pub/sub (a Ring) and after Close the channel never fires and waits
// poll.
func (l *Locker) NotifyRelease(_ context.Context, key string) (released <-chan struct{}, stop func()) {
	if l.notify == nil || driver.CheckKey(key) != nil {
		return nil, func() {}
	}
	return l.notify.Register(l.cfg.Prefix + key)
}

// Close ends the Locker's subscription to release announcements (a
// goroutine and a pub/sub connection, opened the first time a waiting
// Acquire finds a key busy, and otherwise closed when the client is closed
// or after 30s without waiters) and takes the Locker out of the waiter
// queues it is in. Waits in progress and later ones fall back to polling;
// locks, TryAcquire and Release keep working. Close does not close the
// client. It is safe to call more than once and concurrently with other
// methods, and returns nil.
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
	g := &grant{l: l, key: l.cfg.Prefix + key, token: token}
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
	g := &grant{l: l, key: l.cfg.Prefix + key, token: token}
	if _, err := g.Extend(ctx, ttl); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", key, err)
	}
	return nil
}

// grant is one held lock's connection to the server.
type grant struct {
	l          *Locker
	key, token string
	fence      int64  // 0 for a lock known only by its token
	holder     string // the holder record written at the grant (WithHolderInfo)
	// tokenArg is the release script's ARGV, the token boxed by the
	// attempt (go-redis copies it): two allocations less per cycle. With
	// the fence TTL boxed once, a TryAcquire+Release cycle allocated 31
	// times against 35 before (go test -bench), below bsm/redislock's 33.
	tokenArg []any
}

// Extend resets the TTL if the key still holds the token (and renews the
// fence counter's TTL, so that a lock held for long keeps its counter).
func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	l := g.l
	if err := l.cfg.CheckTTL(ttl); err != nil {
		return time.Time{}, err
	}
	ms := driver.Milliseconds(ttl)
	tctx, cancel := l.oneTry(ctx)
	defer cancel()
	start := time.Now()
	held := false
	if g.fence == 0 && l.features(tctx).SetIfEq {
		// SET IFEQ cannot refresh a fence counter: a lock with a fence
		// extends through the script, which does (and ExtendToken, which
		// knows no fence, leaves the counter alone either way).
		err := l.client.SetIFEQ(tctx, g.key, g.token, g.token, time.Duration(ms)*time.Millisecond).Err()
		if err != nil && err != redis.Nil {
			return time.Time{}, l.opErr(ctx, err, false)
		}
		held = err == nil
	} else {
		ks, args := []string{g.key}, []any{g.token, ms, 0}
		if g.fence > 0 {
			ks, args = []string{g.key, keys.Fence(g.key)}, []any{g.token, ms, g.fence, l.cfg.FenceTTL.Milliseconds()}
		}
		n, err := l.run(tctx, scripts.Extend, ks, args).Int64()
		if err != nil {
			return time.Time{}, l.opErr(ctx, err, false)
		}
		held = n == 1
	}
	if !held {
		return time.Time{}, fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	g.extendHolder(tctx, ttl)
	return driver.ValidUntil(start, ttl, l.cfg.DriftFactor), nil
}

// Release deletes the key if it still holds the token, and wakes the
// longest waiter of the key in the same round trip.
func (g *grant) Release(ctx context.Context) error {
	tctx, cancel := g.l.oneTry(ctx)
	defer cancel()
	var n, woken int64
	var err error
	if g.holder != "" {
		n, woken, err = g.l.releaseHolder(tctx, g.key, g.token, g.holder)
	} else {
		n, woken, err = g.l.release(tctx, g.key, g.token, g.tokenArg, true)
	}
	if err != nil {
		return g.l.opErr(ctx, err, false)
	}
	if woken > 0 && g.l.notify != nil {
		g.l.notify.Woke(g.key)
	}
	if n == 0 {
		return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	return nil
}

// release deletes key if it holds token and, with wakeUp, wakes the key's
// longest waiter; it returns the number of keys deleted and of waiters
// woken. tokenArg, when not nil, is token as the script's ARGV.
func (l *Locker) release(ctx context.Context, key, token string, tokenArg []any, wakeUp bool) (deleted, woken int64, err error) {
	if n := l.features(ctx); n.Release != "" {
		if !wakeUp {
			deleted, err = l.client.Do(ctx, n.ReleaseArgs(key, token)...).Int64()
			return deleted, 0, err
		}
		pipe := l.client.Pipeline()
		del := pipe.Do(ctx, n.ReleaseArgs(key, token)...)
		wakeKeys := []string{key, keys.Queue(key)}
		wake := scripts.Wake.EvalSha(ctx, pipe, wakeKeys)
		rclient.Exec(ctx, pipe)
		if err := wake.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && del.Err() == nil {
			wake = scripts.Wake.Run(ctx, l.client, wakeKeys)
		}
		woken, _ = wake.Int64() // best effort: a lost wake-up is found by polling
		deleted, err = del.Int64()
		return deleted, woken, err
	}
	var ks []string
	if wakeUp {
		ks = []string{key, keys.Queue(key)}
	} else {
		ks = []string{key}
	}
	if tokenArg == nil {
		tokenArg = []any{token}
	}
	return scripts.ReleaseReply(l.run(ctx, scripts.Release, ks, tokenArg).Result())
}

// run runs script s, through the Locker's batch on a single-node client.
// A call whose context ended before the reply has a *batch.LeftError as
// its command's error.
func (l *Locker) run(ctx context.Context, s *redis.Script, ks []string, args []any) *redis.Cmd {
	return scripts.Run(ctx, l.batch, l.client, s, ks, args)
}

// cleanup deletes key if it holds token, in the background and within a
// short bound: the caller has already given up on the attempt. It wakes
// nobody: the lock was never held.
func (l *Locker) cleanup(ctx context.Context, key, token string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 500*time.Millisecond))
	go func() {
		defer cancel()
		_, _, _ = l.release(ctx, key, token, nil, false)
	}()
}

// features reports which of the server's own commands release and extend
// (DELEX or DELIFEQ, SET IFEQ), probing the server once, with its eviction
// policy, in one round trip (rclient.Probe). A call that finds a probe in
// progress waits for it within ctx, and uses the scripts if ctx ends
// first; a probe that got no answer is made again by the next call.
func (l *Locker) features(ctx context.Context) rclient.Native {
	if l.probedOK.Load() {
		return l.native // written before probedOK was set
	}
	select {
	case l.probing <- struct{}{}:
		defer func() { <-l.probing }()
	case <-ctx.Done():
		return rclient.Native{}
	}
	if l.probedOK.Load() {
		return l.native
	}
	n, policy, ok := rclient.Probe(ctx, l.client, "dlock:probe:"+driver.NewToken())
	if !ok {
		return rclient.Native{} // unreachable now: use the scripts, probe again next time
	}
	l.native = n
	l.probedOK.Store(true)
	rclient.WarnEviction(l.cfg.Logger, l.node, policy)
	return n
}

// opErr classifies an error of a call to the server (nodeerr.Error): an
// acquisition whose context ended matches dlock.ErrNotAcquired (it did not
// get the lock).
func (l *Locker) opErr(ctx context.Context, err error, acquiring bool) error {
	return nodeerr.Error(ctx, l.node, err, rclient.Kind(err), acquiring)
}

// oneTry bounds one try (everything a call sends: the probe, the script,
// the holder record, go-redis's retries) by the client's dial and read
// timeouts together, so that a server that accepts connections and never
// answers costs one try's bound, not one read timeout per request.
func (l *Locker) oneTry(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.tryTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.tryTimeout)
}
