package redislock

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/scripts"
)

// Locker takes locks on one Redis deployment (a single node, a Sentinel
// group or a Cluster) through a go-redis client. It is safe for concurrent
// use; create one per client and share it.
type Locker struct {
	client      redis.UniversalClient
	node        string // how errors name the server
	prefix      string
	driftFactor float64
	native      NativeMode
	logger      *slog.Logger
	notify      *notifier     // wake-on-release (notify.go); nil for clients without usable pub/sub
	handoffArg  any           // handoffAfter in µs, boxed once for the scripts
	reserveArg  any           // reserveFor in µs
	directAfter time.Duration // the least hold whose release may grant directly; tests change it
	backAtOnce  time.Duration // an attempt this soon after a short hold's release comes back at once (notify.go); tests change it
	lastTTL     atomic.Pointer[boxedTTL]
	keySets     keyCache                     // the derived keys of keys used lately
	retake      atomic.Pointer[quietHint]    // the last quiet release (notify.go)
	lastShort   atomic.Pointer[shortRelease] // the last release of a short hold while waiting (notify.go)
	pipes       sync.Pool                    // redis.Pipeliners, reused: each costs a few allocations

	probeMu   sync.Mutex
	probed    bool
	probedOK  atomic.Bool // probed, readable without probeMu on the hot path
	nativeDel bool        // DELEX key IFEQ token
	nativeSet bool        // SET key token PX ttl IFEQ token
}

var _ dlock.Locker = (*Locker)(nil)

// New returns a Locker over client. It sends nothing to the server; support
// for the Redis 8.4 commands is detected on first use.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if rclient.IsNil(client) {
		return nil, dlock.Invalidf("nil redis client")
	}
	l := &Locker{client: client, node: rclient.Name(client), driftFactor: dlock.DefaultDriftFactor, logger: slog.Default(), notify: newNotifier(client)}
	l.keySets.seed = maphash.MakeSeed()
	l.setPolicy(handoffAfter, reserveFor)
	l.directAfter, l.backAtOnce = directAfter, backAtOnce
	for _, o := range opts {
		if o == nil {
			return nil, dlock.Invalidf("nil option")
		}
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if !rclient.ContextTimeouts(client) {
		l.logger.Warn("dlock: the redis client ignores context deadlines (ContextTimeoutEnabled is false): a call to a server that does not answer returns only after ReadTimeout",
			"node", l.node)
	}
	return l, nil
}

// TryAcquire makes one attempt to take the lock on key for ttl: SET key token
// NX PX ttl and the fence counter's INCR, pipelined in one round trip (a
// refused SET costs a second one, which says why). It returns an error
// matching dlock.ErrNotAcquired when another owner holds key or it is
// reserved for a woken waiter, dlock.ErrUnavailable when the server could
// not be reached (a SET that may have landed is then deleted again, best
// effort), and dlock.ErrInvalid for bad arguments.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := l.check(ctx, key, ttl); err != nil {
		return nil, err
	}
	g := newGrant(l, l.prefix+key, dlock.NewToken())
	start := time.Now()
	fence, err := l.acquire(ctx, g, ttl, start) // notify.go: joins the waiter queue when a local Acquire waits
	if err != nil {
		if !isServerReply(err) && !g.carried {
			// The reply was lost, not the request: the key may be ours
			// now. Remove it so it does not block others for a whole TTL.
			// (A token the Locker's waiters share stays theirs: notify.go.)
			l.cleanup(ctx, g, ttl)
		}
		if cerr := rclient.CtxErr(ctx); cerr != nil {
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, errors.Join(dlock.ErrNotAcquired, cerr, l.nodeErr(err)))
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w: %w", key, dlock.ErrUnavailable, l.nodeErr(err))
	}
	switch {
	case fence == 0:
		return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner)", key, dlock.ErrNotAcquired)
	case fence == reservedReply:
		return nil, fmt.Errorf("dlock: acquire %q: %w (free, but reserved for the waiter its last release woke, for at most %v)", key, dlock.ErrNotAcquired, reserveFor)
	case fence < 0:
		return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner, and the key has no expiry: was it set by hand?)", key, dlock.ErrNotAcquired)
	}
	if !g.anchor.IsZero() {
		start = g.anchor // a direct grant: its TTL started after that (notify.go)
	}
	validUntil := dlock.ValidUntil(start, ttl, l.driftFactor)
	if elapsed := time.Since(start); !validUntil.After(start.Add(elapsed)) {
		l.cleanup(ctx, g, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, no validity left of ttl %v)", key, dlock.ErrNotAcquired, elapsed, ttl)
	}
	g.heldSince = time.Now()
	return dlock.NewLock(key, g.token, uint64(fence), validUntil, g), nil
}

// Acquire takes the lock on key, waiting while it is held (see dlock.Acquire
// for the retry options and errors).
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...dlock.Option) (*dlock.Lock, error) {
	return dlock.Acquire(ctx, l, key, ttl, opts...)
}

// Do runs fn under the lock on key with auto-extension (see dlock.Do).
func (l *Locker) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...dlock.Option) error {
	return dlock.Do(ctx, l, key, ttl, fn, opts...)
}

// ReleaseToken releases the lock on key if it still holds token. It is for
// holders that kept only the token, such as shell scripts using `dlock
// acquire`; code with a *dlock.Lock should call its Release. It returns an
// error matching dlock.ErrNotHeld when key does not hold token.
func (l *Locker) ReleaseToken(ctx context.Context, key, token string) error {
	if err := checkToken(ctx, key, token); err != nil {
		return err
	}
	if err := l.release(ctx, newGrant(l, l.prefix+key, token)); err != nil {
		return fmt.Errorf("dlock: release %q: %w", key, err)
	}
	return nil
}

// ExtendToken resets the TTL of the lock on key if it still holds token (see
// ReleaseToken for when to use it). It returns an error matching
// dlock.ErrNotHeld when key does not hold token.
func (l *Locker) ExtendToken(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := checkToken(ctx, key, token); err != nil {
		return err
	}
	if err := l.checkTTL(ttl); err != nil {
		return err
	}
	if err := l.extend(ctx, l.prefix+key, token, ttl); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", key, err)
	}
	return nil
}

// grant is one held lock's connection to the server. It is allocated
// before the attempt and carries everything the scripts take, so that an
// acquire+release cycle allocates little beyond what go-redis does: each
// call's EVALSHA arguments are built in args (see argv) from values boxed
// once (a string put in an interface allocates).
type grant struct {
	l          *Locker
	key, token string
	keys       *keySet
	tokenArg   any     // token, boxed once for every script
	args       [18]any // the arguments of the grant's current call
	// quietUntil: the lock was taken by barging while the queue's head
	// was young; a release before then need not hand it on (notify.go).
	quietUntil time.Time
	// anchor: the lock came by a direct grant, whose TTL started after
	// this time (notify.go).
	anchor time.Time
	// heldSince: when the attempt returned the lock. A release at least
	// directAfter later may grant it to the queue's head directly.
	heldSince time.Time
	// carried: the attempt sent the token of the Locker's waiters on the
	// key (notify.go).
	carried bool
}

// directAfter is how long a lock must have been held before its release may
// grant it to the queue's head directly. A holder that takes the lock again
// at once (hold 0) hands it on through a reservation instead: the woken
// waiter's round trip leaves time for the holder's next attempt, refused,
// to tell the scripts that the lock is being re-taken at once (queue.lua's
// b, notify.go's shortRelease), which lets it barge while the head is
// young. A granted waiter's own release would come before that (notify.go).
const directAfter = time.Millisecond

// setToken makes t the token g's calls send: the interest's token, which a
// release may grant the lock to (notify.go).
func (g *grant) setToken(t string) { g.token, g.tokenArg = t, t }

// direct reports whether g's release may grant the lock to the queue's head
// directly (directAfter). Only then does it send the fence key and the
// flag, so a quick release costs what it did without direct grants.
func (g *grant) direct() bool {
	return !g.heldSince.IsZero() && time.Since(g.heldSince) >= g.l.directAfter
}

// argv returns the arguments of an EVALSHA of s on keys with args, built in
// g.args. A grant's calls never overlap: its attempt comes first, and
// dlock.Lock runs one Release at a time (a failed attempt's cleanup has no
// Lock).
func (g *grant) argv(s *redis.Script, keys []any, args ...any) []any {
	h, ok := scriptHashes[s]
	if !ok {
		h = s.Hash()
	}
	a := append(g.args[:0], "evalsha", h, len(keys))
	a = append(a, keys...)
	return append(a, args...)
}

// scriptHashes holds the SHAs of the scripts a grant runs, boxed once.
var scriptHashes = map[*redis.Script]any{
	scripts.Acquire:        scripts.Acquire.Hash(),
	scripts.AcquireWaiting: scripts.AcquireWaiting.Hash(),
	scripts.Release:        scripts.Release.Hash(),
}

// quiet reports whether g's release may skip the waiter queue.
func (g *grant) quiet() bool {
	return !g.quietUntil.IsZero() && time.Now().Before(g.quietUntil)
}

func newGrant(l *Locker, full, token string) *grant {
	ks := l.keySets.get(full)
	return &grant{l: l, key: full, token: token, keys: ks, tokenArg: token}
}

// releaseKeys returns the release script's keys: lock, waiter queue, queue
// state, fence counter.
func (g *grant) releaseKeys() []string {
	return []string{g.keys.strs[0], g.keys.strs[3], g.keys.strs[2], g.keys.strs[1]}
}

// keySet is a lock key with its derived keys (the fence counter, the
// waiter queue's state, the waiter queue), as strings and boxed once as
// script arguments: in that order, and in the release script's (lock,
// queue, state, fence).
type keySet struct {
	strs    [4]string
	boxed   [4]any
	release [4]any
}

// keyCache keeps the keySets of recently used keys, so that a key taken
// again and again (the usual case, also with many keys in turn) builds its
// derived keys once: a fixed array indexed by the key's hash, where a
// colliding key replaces the older one.
type keyCache struct {
	seed  maphash.Seed
	slots [256]atomic.Pointer[keySet]
}

func (c *keyCache) get(full string) *keySet {
	slot := &c.slots[maphash.String(c.seed, full)%uint64(len(c.slots))]
	if ks := slot.Load(); ks != nil && ks.strs[0] == full {
		return ks
	}
	fence, queue, state := derivedKeys(full)
	ks := &keySet{strs: [4]string{full, fence, state, queue}}
	for i, k := range ks.strs {
		ks.boxed[i] = k
	}
	ks.release = [4]any{ks.boxed[0], ks.boxed[3], ks.boxed[2], ks.boxed[1]}
	slot.Store(ks)
	return ks
}

// derivedKeys returns keys.Fence(full), wake.QueueKey(full) and the queue's
// state key (statePrefix), all in full's Cluster slot, built in one
// allocation.
func derivedKeys(full string) (fence, queue, state string) {
	const fp, qp, sp = "dlock:fence:", "dlock:waiters:", statePrefix
	tagged := keys.HasHashTag(full)
	tag := len(full)
	if !tagged {
		tag += 2
	}
	var b strings.Builder
	b.Grow(len(fp) + len(qp) + len(sp) + 3*tag)
	for _, p := range [3]string{fp, qp, sp} {
		b.WriteString(p)
		if tagged {
			b.WriteString(full)
		} else {
			b.WriteByte('{')
			b.WriteString(full)
			b.WriteByte('}')
		}
	}
	s := b.String()
	f, q := len(fp)+tag, len(fp)+len(qp)+2*tag
	return s[:f], s[f:q], s[q:]
}

func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if err := g.l.checkTTL(ttl); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	if err := g.l.extend(ctx, g.key, g.token, ttl); err != nil {
		return time.Time{}, err
	}
	return dlock.ValidUntil(start, ttl, g.l.driftFactor), nil
}

func (g *grant) Release(ctx context.Context) error { return g.l.release(ctx, g) }

func (l *Locker) release(ctx context.Context, g *grant) error {
	var n int64
	var err error
	// Both read the clock once, before the call: what the release sent
	// and what is recorded after it agree.
	quiet, direct := g.quiet(), g.direct()
	if del, _ := l.features(ctx); del {
		n, err = l.releaseNative(ctx, g, quiet, direct)
	} else {
		// Given the waiter queue, the script also hands the lock on to
		// its head (notify.go).
		var argv []any
		switch {
		case quiet:
			argv = g.argv(scripts.Release, g.keys.release[:1], g.tokenArg)
		case direct:
			argv = g.argv(scripts.Release, g.keys.release[:], g.tokenArg, "1") // lock, queue, state, fence
		default:
			argv = g.argv(scripts.Release, g.keys.release[:3], g.tokenArg)
		}
		n, err = scripts.RunArgv(ctx, l.client, scripts.Release, argv).Int64()
	}
	if err != nil {
		return l.opErr(ctx, err)
	}
	if n == 0 {
		return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	if quiet {
		l.retake.Store(&quietHint{key: g.key, until: g.quietUntil})
	}
	if n := l.notify; n != nil && !direct && !g.heldSince.IsZero() && n.subscribed.Load() {
		l.lastShort.Store(&shortRelease{key: g.key, at: time.Now()})
	}
	return nil
}

func (l *Locker) extend(ctx context.Context, key, token string, ttl time.Duration) error {
	ms := dlock.Milliseconds(ttl)
	held := false
	if _, set := l.features(ctx); set {
		err := l.client.SetIFEQ(ctx, key, token, token, time.Duration(ms)*time.Millisecond).Err()
		if err != nil && err != redis.Nil {
			return l.opErr(ctx, err)
		}
		held = err == nil
	} else {
		n, err := scripts.Extend.Run(ctx, l.client, []string{key}, token, ms).Int64()
		if err != nil {
			return l.opErr(ctx, err)
		}
		held = n == 1
	}
	if !held {
		return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	return nil
}

// cleanup deletes g's key if it holds g's token, in the background and
// within a short bound: the caller has already given up on the attempt.
func (l *Locker) cleanup(ctx context.Context, g *grant, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 500*time.Millisecond))
	go func() {
		defer cancel()
		_ = l.release(ctx, g)
	}()
}

// features reports which Redis 8.4 commands to use, probing the server once.
func (l *Locker) features(ctx context.Context) (del, set bool) {
	switch l.native {
	case NativeAlways:
		return true, true
	case NativeNever:
		return false, false
	}
	if l.probedOK.Load() {
		return l.nativeDel, l.nativeSet // written before probedOK was set
	}
	l.probeMu.Lock()
	defer l.probeMu.Unlock()
	if l.probed {
		return l.nativeDel, l.nativeSet
	}
	probe := "dlock:probe:" + dlock.NewToken()
	delErr := l.client.DelExArgs(ctx, probe, redis.DelExArgs{Mode: "IFEQ", MatchValue: "x"}).Err()
	setErr := l.client.SetIFEQ(ctx, probe, "x", "y", time.Millisecond).Err()
	if !answered(delErr) || !answered(setErr) {
		return false, false // unreachable now: use the scripts, probe again next time
	}
	l.probed = true
	l.nativeDel = delErr == nil || delErr == redis.Nil
	l.nativeSet = setErr == nil || setErr == redis.Nil
	l.probedOK.Store(true)
	l.warnEviction(ctx)
	return l.nativeDel, l.nativeSet
}

// warnEviction warns when the server may evict lock keys before their TTL:
// an evicted lock key is a second holder (FAULTS.md F10).
func (l *Locker) warnEviction(ctx context.Context) {
	cfg, err := l.client.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return // CONFIG may be disabled or renamed; nothing to say then
	}
	if p := cfg["maxmemory-policy"]; p != "" && p != "noeviction" {
		l.logger.Warn("dlock: redis may evict lock keys before they expire; set maxmemory-policy noeviction",
			"node", l.node, "maxmemory-policy", p)
	}
}

func (l *Locker) check(ctx context.Context, key string, ttl time.Duration) error {
	if ctx == nil {
		return dlock.Invalidf("nil context")
	}
	if err := dlock.CheckKey(key); err != nil {
		return err
	}
	return l.checkTTL(ttl)
}

func (l *Locker) checkTTL(ttl time.Duration) error {
	if err := dlock.CheckTTL(ttl); err != nil {
		return err
	}
	if d := dlock.Drift(ttl, l.driftFactor); ttl <= d {
		return dlock.Invalidf("ttl %v: must exceed the clock-drift margin %v", ttl, d)
	}
	return nil
}

// opErr classifies an error of an extend or release: the context's own
// error when it ended, otherwise an unreachable or failing server.
func (l *Locker) opErr(ctx context.Context, err error) error {
	if cerr := rclient.CtxErr(ctx); cerr != nil {
		return errors.Join(cerr, l.nodeErr(err))
	}
	return fmt.Errorf("%w: %w", dlock.ErrUnavailable, l.nodeErr(err))
}

func (l *Locker) nodeErr(err error) error { return &dlock.NodeError{Node: l.node, Err: err} }

// answered reports whether err is a reply from the server (success, nil or a
// server error) rather than a network failure.
func answered(err error) bool { return err == nil || err == redis.Nil || isServerReply(err) }

func isServerReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && err != redis.Nil
}

// checkToken validates the arguments of the operations that take a token
// instead of a handle.
func checkToken(ctx context.Context, key, token string) error {
	if ctx == nil {
		return dlock.Invalidf("nil context")
	}
	return dlock.CheckToken(key, token)
}
