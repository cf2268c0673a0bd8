package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rnode"
	"github.com/dlock-go/dlock/internal/wake"
)

// Locker takes Redlock locks over N independent Redis masters. It is safe
// for concurrent use; create one per set of clients and share it.
type Locker struct {
	nodes       []*node
	quorum      int
	cfg         backend.Config
	nodeTimeout time.Duration
	strict      bool
	notify      *wake.Notifier
	workers     workers     // the goroutines of the fan-outs
	distinct    atomic.Bool // every node answered with a run_id of its own (awaitMajority)
	releasing   sync.Map    // the keys of each release under way to its *progress (releasingOn)
}

type node struct {
	*rnode.Node
	// dupOf is 1+the index of an earlier node found to be the same server
	// (0: none): its votes do not count, the quorum counts machines.
	dupOf atomic.Int32
	run   atomic.Pointer[string] // the server's run_id, once it answered
	// probed: the probe got an answer, if only a refusal (an ACL that
	// denies INFO): it is not sent again.
	probed atomic.Bool
}

var _ dlock.Locker = (*Locker)(nil)

// New returns a Locker over clients, one per independent Redis master (no
// replication between them; replicas, Cluster and Ring clients are not
// nodes). It sends nothing to the servers.
//
// It rejects no clients, a nil client, and Cluster or Ring clients with an
// error matching dlock.ErrInvalid. It warns (through WithLogger) about an
// even number of nodes (a split of N/2 and N/2 blocks everyone), fewer than
// three (no failure is tolerated), and two clients with the same address;
// with WithStrict(true) these are errors too.
func New(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(clients) == 0 {
		return nil, bridge.Invalidf("no redis clients: Redlock needs N independent masters (5 is usual)")
	}
	l := &Locker{
		workers:     newWorkers(),
		quorum:      len(clients)/2 + 1,
		cfg:         backend.New(backend.FenceTTL, true),
		nodeTimeout: defaultNodeTimeout,
	}
	if err := backend.Apply(l, opts); err != nil {
		return nil, err
	}
	for i, c := range clients {
		if nodeerr.IsNil(c) {
			return nil, bridge.Invalidf("redis client #%d is nil", i+1)
		}
		switch c.(type) {
		case *redis.ClusterClient:
			return nil, bridge.Invalidf("redis client #%d is a Cluster client: Redlock needs independent single masters, one client each", i+1)
		case *redis.Ring:
			return nil, bridge.Invalidf("redis client #%d is a Ring: Redlock needs independent single masters, one client each", i+1)
		}
		l.nodes = append(l.nodes, &node{Node: rnode.New(c, nodeName(c, i), l.cfg.FenceTTL, l.nodeTimeout, nil)})
	}
	l.notify = wake.New(clients)
	var problems []string
	n := len(l.nodes)
	if n < 3 {
		problems = append(problems, fmt.Sprintf("%d nodes: Redlock tolerates no failed node below 3", n))
	} else if n%2 == 0 {
		problems = append(problems, fmt.Sprintf("%d nodes: an even number tolerates no more failures than %d, and splits can leave nobody a majority", n, n-1))
	}
	for i, nd := range l.nodes {
		if j := slices.IndexFunc(l.nodes[:i], func(m *node) bool { return m.Name == nd.Name }); j >= 0 {
			problems = append(problems, fmt.Sprintf("clients #%d and #%d both point to %s: one server would vote twice", j+1, i+1, nd.Name))
			nd.dupOf.Store(int32(j + 1))
		}
	}
	for _, p := range problems {
		if l.strict {
			return nil, bridge.Invalidf("%s", p)
		}
		l.cfg.Logger.Warn("dlock/redlock: "+p, "nodes", n)
	}
	l.cfg.Done("redlock")
	return l, nil
}

// Nodes is how many nodes granted the lock (see driver.Grant).
func (g *grant) Nodes() int { return g.nodes }

// TryAcquire makes one attempt to take the lock on key on a majority of the
// nodes for ttl, and issues its fence. It returns dlock.ErrInvalid for bad
// arguments; any other failure is a *QuorumError whose sentinel says why
// (dlock.ErrNotAcquired also when the attempt took so long that no
// validity was left), returned once the attempt was undone on every node.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return multi{l, []string{key}}.TryAcquire(ctx, key, ttl)
}

// Keys returns a Locker that takes the locks on all of keys at once, or
// none: on each node one script sets every key or refuses them all, and the
// lock is held when a majority of nodes granted all of them. Its
// TryAcquire's key names the group (the handle's Key and the events' key)
// and sets no key of its own. The handle's fence is above the earlier
// fences of every one of keys; Extend and Release act on all of them. Its
// waits poll:
//
//	err := dlock.Do(ctx, locker.Keys("account:1", "account:2"), "transfer", ttl, fn)
//
// Its TryAcquire returns errors as this Locker's does, and rejects no keys,
// an empty key and a repeated one with dlock.ErrInvalid.
func (l *Locker) Keys(keys ...string) dlock.Locker {
	return multi{l, slices.Clone(keys)}
}

// multi is the Locker of Keys, and of TryAcquire (one key, named by itself).
type multi struct {
	l    *Locker
	keys []string
}

func (m multi) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	return m.l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) {
		if err := bridge.CheckKey(name); err != nil {
			return nil, err
		}
		if err := m.l.checkKeys(m.keys); err != nil {
			return nil, err
		}
		return m.l.tryAcquire(ctx, m.keys, name, ttl)
	})
}

// ReleaseToken releases the lock on key if it still holds token, on every
// node, and waits for every node's answer (Lock.Release returns on a
// majority's). It is for holders that kept only the token, such as shell
// scripts using `dlock acquire`. It returns an error matching
// dlock.ErrNotHeld when no majority of nodes held key with token, and
// dlock.ErrUnavailable when too few nodes answered to tell (call it again).
//
// Without the handle it does not know the lock's fence, which it must write
// to every node's counter: it writes the largest of the nodes' counters and
// clocks, plus the fence TTL when some node did not answer that read
// (docs/fences.md); when none did, it deletes nothing and returns an error
// matching dlock.ErrUnavailable.
func (l *Locker) ReleaseToken(ctx context.Context, key, token string) error {
	g, err := l.byToken(ctx, "release", key, token)
	if err != nil {
		return err
	}
	g.waitAll = true
	if err := g.Release(ctx); err != nil {
		return fmt.Errorf("dlock: release %q: %w", key, err)
	}
	return nil
}

// ExtendToken resets the TTL of the lock on key on every node that still
// holds token; it succeeds when a majority did (see ReleaseToken for when to
// use it). It returns an error matching dlock.ErrNotHeld when a majority no
// longer holds key with token.
func (l *Locker) ExtendToken(ctx context.Context, key, token string, ttl time.Duration) error {
	g, err := l.byToken(ctx, "extend", key, token)
	if err != nil {
		return err
	}
	if _, err := g.Extend(ctx, ttl); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", key, err)
	}
	return nil
}

// byToken returns the grant of a lock known by its key and token, with a
// fence read from the nodes.
func (l *Locker) byToken(ctx context.Context, op, key, token string) (*grant, error) {
	if err := l.cfg.CheckToken(ctx, key, token); err != nil {
		return nil, err
	}
	full := []string{l.cfg.Prefix + key}
	fence, err := l.readFence(ctx, full)
	if err != nil {
		return nil, fmt.Errorf("dlock: %s %q: %w", op, key, err)
	}
	return &grant{l: l, keys: full, token: token, fence: fence}, nil
}

func (l *Locker) checkKeys(ks []string) error {
	if len(ks) == 0 {
		return bridge.Invalidf("no keys")
	}
	for i, k := range ks {
		if err := l.cfg.CheckKey(k); err != nil {
			return err
		}
		if slices.Contains(ks[:i], k) {
			return bridge.Invalidf("key %q given twice", k)
		}
	}
	return nil
}

// timeout is the node timeout for an operation with ttl, cut to the TTL's
// validity: a later reply could leave none.
func (l *Locker) timeout(ttl time.Duration) time.Duration {
	return min(l.nodeTimeout, ttl-bridge.Drift(ttl, l.cfg.DriftFactor))
}

// grant is one held Redlock lock.
type grant struct {
	l      *Locker
	keys   []string // with the prefix
	token  string
	holder string // the holder record written with the grant ("": none)
	fence  int64  // written by extensions and the release to every counter below it
	// acquiring tells which nodes have answered the acquisition (nil: all
	// had): a later request to node i waits for node i's answer, or it
	// could overtake it and leave a key behind until its TTL.
	acquiring *progress
	nodes     int    // how many nodes granted the lock when it counted as held
	waitAll   bool   // Release waits for every node (ReleaseToken: the caller may exit)
	sem       string // a permit's semaphore ("": a lock)
}

// Extend and Release: see Protocol in the package documentation.
func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if err := g.l.cfg.CheckTTL(ttl); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	timeout := g.l.timeout(ttl)
	res := vote(ctx, g.l, sending{timeout: timeout, after: g.acquiring}, func(ctx context.Context, _ int, n *node) error {
		held, err := n.Extend(ctx, g.keys, g.token, g.holder, g.sem, g.fence, ttl)
		if err != nil {
			return g.l.nodeErr(err, timeout)
		}
		if !held {
			return errNotHeldHere
		}
		return nil
	}).all()
	qe, refused := g.l.tally("extend", res, nil, errNotHeldHere)
	if qe.Got >= g.l.quorum {
		return bridge.ValidUntil(start, ttl, g.l.cfg.DriftFactor), nil
	}
	if g.l.tooMany(refused) {
		qe.sentinel, qe.Reason = dlock.ErrNotHeld, "a majority no longer holds the lock"
	}
	g.l.misconfigured(qe)
	return time.Time{}, g.l.withCtx(ctx, qe)
}

// Release returns when a majority deleted, or ctx ended, with the
// deletions still under way.
func (g *grant) Release(ctx context.Context) error {
	c := g.l.release(ctx, rnode.Release{Keys: g.keys, Token: g.token, Holder: g.holder, Fence: g.fence, Wake: true, Sem: g.sem}, g.acquiring)
	ok := 0
	for c.left > 0 && (ok < g.l.quorum || g.waitAll) {
		i := c.next(ctx.Done())
		if i < 0 {
			break
		}
		if c.out[i] == nil {
			ok++
		}
	}
	if ok >= g.l.quorum {
		return nil
	}
	qe, refused := g.l.tally("release", c.out, c.got, errNotHeldHere)
	qe.sentinel, qe.Reason = dlock.ErrNotHeld, "the lock was no longer held by a majority"
	if failed := len(g.l.nodes) - qe.Got - refused; qe.Got+failed >= g.l.quorum && failed > 0 {
		qe.sentinel, qe.Reason = dlock.ErrUnavailable, "too few nodes answered to tell; release again"
	}
	g.l.misconfigured(qe)
	return g.l.withCtx(ctx, qe)
}

var (
	errNotHeldHere = errors.New("does not hold the lock's token")
	errNoAnswerYet = errors.New("no answer yet when the caller's context ended")
)

// release sends rel to every node, each node's after that node answered
// the acquisition (after), and returns at once; a node's outcome is nil
// when it deleted. The deletions run to the end whatever ctx, so that
// giving up on a release leaves no key behind; until they have, the
// Locker's next acquisition of the keys waits for them (releasingOn).
func (l *Locker) release(ctx context.Context, rel rnode.Release, after *progress) *inflight[error] {
	// Registered before the deletions are sent, for the last to remove.
	id, p := strings.Join(rel.Keys, "\x00"), newProgress(len(l.nodes))
	l.releasing.Store(id, p)
	finally := func() { l.releasing.CompareAndDelete(id, p) }
	return vote(context.WithoutCancel(ctx), l, sending{timeout: l.nodeTimeout, after: after, progress: p, finally: finally}, func(ctx context.Context, _ int, n *node) error {
		deleted, woken, err := n.Release(ctx, rel)
		if err != nil {
			return l.nodeErr(err, l.nodeTimeout)
		}
		if woken > 0 && len(rel.Keys) == 1 {
			l.notify.Woke(cmp.Or(rel.Sem, rel.Keys[0])) // a permit's release announces its semaphore
		}
		if deleted == 0 {
			return errNotHeldHere
		}
		return nil
	})
}

// releasingOn returns the progress of this Locker's release of keys while
// it is under way on some node (nil: none is). An attempt on the same keys
// goes to each node after that node's deletion, or it would find its own
// old key on the late nodes and lose them from its majority.
func (l *Locker) releasingOn(keys []string) *progress {
	v, ok := l.releasing.Load(strings.Join(keys, "\x00"))
	if !ok {
		return nil
	}
	return v.(*progress)
}

// releaseEverywhere undoes a failed acquisition on every node, including
// those whose reply was lost, and waits for them (a node timeout at most).
// It wakes nobody: the lock was never held, and a waiter would only retry
// against the same holder.
func (l *Locker) releaseEverywhere(ctx context.Context, t *try) {
	l.release(ctx, rnode.Release{Keys: t.Keys, Token: t.Token, Holder: t.Holder}, nil).all()
}

// tally returns the QuorumError (ErrUnavailable) of op whose nodes' results
// are res (got, if not nil, tells which nodes answered): Got counts the nil
// results, ref those that are refused.
func (l *Locker) tally(op string, res []error, got []bool, refused error) (qe *QuorumError, ref int) {
	qe = &QuorumError{Op: op, Need: l.quorum, Nodes: make([]NodeResult, len(res)), sentinel: dlock.ErrUnavailable}
	for i := range res {
		err := errNoAnswerYet // res[i] may still be written
		if got == nil || got[i] {
			err = res[i]
		}
		qe.Nodes[i] = NodeResult{Node: l.nodes[i].Name, OK: err == nil, Err: err}
		switch {
		case err == nil:
			qe.Got++
		case errors.Is(err, refused):
			ref++
		}
	}
	return qe, ref
}

// isRefusal reports whether a node's error is a refusal that retrying
// cannot change (a wrong password, an ACL, a replica: rclient.Kind).
func isRefusal(err error) bool { return err != nil && rclient.Kind(err) == nodeerr.Refused }

// tooMany reports whether n nodes that refuse for good leave no majority.
func (l *Locker) tooMany(n int) bool { return n > len(l.nodes)-l.quorum }

// misconfigured makes qe, an operation that failed as unavailable, a
// dlock.ErrMisconfigured when too many nodes refused it for good.
func (l *Locker) misconfigured(qe *QuorumError) {
	refused := 0
	for _, n := range qe.Nodes {
		if isRefusal(n.Err) {
			refused++
		}
	}
	if qe.sentinel == dlock.ErrUnavailable && l.tooMany(refused) {
		qe.sentinel, qe.Reason = dlock.ErrMisconfigured, "too many nodes refused for a majority: fix their setup"
	}
}

// withCtx adds the caller's context error when it ended during the
// operation, for errors.Is.
func (l *Locker) withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}

// nodeErr turns a client error into the node's error in a QuorumError.
func (l *Locker) nodeErr(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) || nodeerr.IsTimeout(err) {
		return fmt.Errorf("no reply within the node timeout %v", timeout)
	}
	return rclient.Describe(err)
}

func nodeName(c redis.UniversalClient, i int) string {
	if c, ok := c.(*redis.Client); ok {
		return c.Options().Addr
	}
	return fmt.Sprintf("client#%d", i+1)
}

var _ driver.ReleaseNotifier = (*Locker)(nil)

// NotifyRelease implements driver.ReleaseNotifier: the channel receives a
// value when the lock on key may have been released on some node. It sends
// nothing; the subscription to a node opens when a waiting attempt first
// finds the key busy there. stop must be called exactly once. After Close
// the channel never fires and waits poll.
func (l *Locker) NotifyRelease(_ context.Context, key string) (released <-chan struct{}, stop func()) {
	if bridge.CheckKey(key) != nil {
		return nil, func() {}
	}
	return l.notify.Register(l.cfg.Prefix + key)
}

// Close ends the Locker's subscriptions to release announcements (one
// pub/sub connection and goroutine per node, opened by waiting Acquires,
// otherwise closed with the clients or after 30s without waiters) and takes
// the Locker out of the waiter queues it is in; waits fall back to polling,
// locks keep working. It also waits, about two node timeouts at most, for
// releases still under way on some nodes (Release returns once a majority
// deleted): a program that exits right after releasing should call Close
// first, or the slower nodes keep the key until its TTL. It does not close
// the clients, is safe to call more than once and concurrently with other
// methods, and returns nil.
func (l *Locker) Close() error {
	l.releasing.Range(func(_, v any) bool {
		for _, ch := range v.(*progress).nodes {
			<-ch
		}
		return true
	})
	l.notify.Close()
	l.workers.close()
	return nil
}
