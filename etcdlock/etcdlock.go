package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/keys"
)

// Locker takes locks on one etcd cluster through a clientv3 client. It is
// safe for concurrent use; create one per client and share it.
type Locker struct {
	client      *clientv3.Client
	node        string // how errors name the cluster
	prefix      string
	driftFactor float64
	logger      *slog.Logger
	observers   []func(context.Context, dlock.Event) // WithObserver's
	observe     func(context.Context, dlock.Event)   // the logger's and observers' (driver.Observable)
	holderHead  string                               // WithHolderInfo's record up to "since"; "" without it

	mu       sync.Mutex
	sessions map[int64][]*session // by lease TTL in seconds
}

var (
	_ dlock.Locker           = (*Locker)(nil)
	_ driver.ReleaseNotifier = (*Locker)(nil)
)

// New returns a Locker over client. It sends nothing to the cluster.
func New(client *clientv3.Client, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, driver.Invalidf("nil etcd client")
	}
	l := &Locker{client: client, node: strings.Join(client.Endpoints(), ","),
		driftFactor: driver.DefaultDriftFactor, logger: slog.Default(), sessions: map[int64][]*session{}}
	for _, o := range opts {
		if o == nil {
			return nil, driver.Invalidf("nil option")
		}
		if err := o(l); err != nil {
			return nil, err
		}
	}
	l.observe = driver.Observers(append([]func(context.Context, dlock.Event){driver.LogEvents(l.logger)}, l.observers...)...)
	return l, nil
}

// Observer implements driver.Observable: the Locker's logger and its
// observers (WithLogger, WithObserver), or nil.
func (l *Locker) Observer() func(ctx context.Context, e dlock.Event) { return l.observe }

// Describe implements driver.Describer for waits through Acquire and Do.
func (w *waiter) Describe() (backend string, nodes int) { return "etcd", 0 }

// Observer implements driver.Observable for waits through Acquire and Do.
func (w *waiter) Observer() func(ctx context.Context, e dlock.Event) { return w.l.observe }

// Observer implements driver.Observable for the lock's own events.
func (g *grant) Observer() func(ctx context.Context, e dlock.Event) { return g.l.observe }

// Describe implements driver.Describer: the backend's name, for the
// events of attempts and refusals.
func (l *Locker) Describe() (backend string, nodes int) { return "etcd", 0 }

// Describe implements driver.Describer.
func (g *grant) Describe() (backend string, nodes int) { return "etcd", 1 }

// queue is the prefix under which the contenders for key have their keys,
// as in concurrency.NewMutex(session, prefix+key).
func (l *Locker) queue(key string) string { return l.prefix + key + "/" }

// TryAcquire makes one attempt to take the lock on key for ttl: in one
// transaction, it creates its key under the session's lease if key's queue
// is empty, and reads the queue's first key otherwise. When another
// contender is first it has written nothing, and returns an error matching
// dlock.ErrNotAcquired. It returns dlock.ErrUnavailable when the cluster
// could not be reached (a *dlock.NodeError in the chain) and
// dlock.ErrInvalid for bad arguments. While the Locker itself has a key in
// key's queue (a lock it holds or waits for, an attempt in flight), it
// answers ErrNotAcquired at once, without a request: it could not be first.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := l.check(ctx, key, ttl); err != nil {
		return nil, err
	}
	if l.queued(key) {
		return nil, fmt.Errorf("dlock: acquire %q: %w (this Locker holds it, waits for it or is taking it)", key, dlock.ErrNotAcquired)
	}
	for retried := false; ; retried = true {
		sl, err := l.take(ctx, key, ttl)
		if err != nil {
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
		}
		c := contender{slot: sl, s: sl.s, name: key, key: sl.key}
		err = l.tryPut(ctx, &c)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			// Revoked by someone else while we thought it alive: once
			// more, on a new lease.
			l.lose(sl.s)
			l.free(sl)
			continue
		}
		if err != nil {
			l.abandon(ctx, &c, ttl) // the put's outcome is unknown
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, l.opErr(ctx, err, true))
		}
		if c.ahead != nil {
			l.free(sl) // nothing was written
			return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner)", key, dlock.ErrNotAcquired)
		}
		return l.granted(ctx, ttl, &c)
	}
}

// contender is a key of ours in a lock's queue.
type contender struct {
	slot  *slot
	s     *session
	name  string // the lock's name, as the caller gave it
	key   string
	rev   int64            // the key's create revision: the fence once it is first
	ahead *mvccpb.KeyValue // the key just ahead of ours, nil when ours is first
	read  int64            // the revision at which ahead was read
	// start is the send time of the request that last saw the key first
	// in its queue, or created it (the lock's validity counts from it).
	start time.Time
	gone  bool // the last read found the key deleted
}

// tryPut is TryAcquire's transaction: the put only if the queue is empty,
// else the read of its first key.
func (l *Locker) tryPut(ctx context.Context, c *contender) error {
	q := l.queue(c.name)
	empty := clientv3.Compare(clientv3.CreateRevision(q), "=", 0).WithPrefix()
	put := clientv3.OpPut(c.key, l.holderValue(), clientv3.WithLease(c.s.id))
	first := clientv3.OpGet(q, clientv3.WithFirstCreate()...)
	c.start = time.Now()
	resp, err := l.client.Txn(ctx).If(empty).Then(put).Else(first).Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		c.rev = resp.Header.Revision
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) > 0 && string(kvs[0].Key) == c.key {
		c.rev = kvs[0].CreateRevision // a retried put whose first reply was lost
		return nil
	}
	c.ahead = &mvccpb.KeyValue{}
	if len(kvs) > 0 {
		c.ahead = kvs[0]
	}
	return nil
}

// enqueue puts c's key under its session's lease at the end of its queue,
// and reads the queue's first key in the same transaction. On an error
// other than a lease not found, the put's outcome is unknown.
func (l *Locker) enqueue(ctx context.Context, c *contender) error {
	// As concurrency.Mutex does: the put and the read of the queue's first
	// key in one transaction, so "first" is decided at the put's revision.
	cmp := clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)
	put := clientv3.OpPut(c.key, l.holderValue(), clientv3.WithLease(c.s.id))
	get := clientv3.OpGet(c.key)
	owner := clientv3.OpGet(l.queue(c.name), clientv3.WithFirstCreate()...)
	c.start = time.Now()
	resp, err := l.client.Txn(ctx).If(cmp).Then(put, owner).Else(get, owner).Commit()
	if err != nil {
		return err
	}
	c.rev, c.read = resp.Header.Revision, resp.Header.Revision
	if !resp.Succeeded { // a retried put whose first reply was lost
		c.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	if first := resp.Responses[1].GetResponseRange().Kvs; len(first) == 0 || first[0].CreateRevision != c.rev {
		c.ahead = &mvccpb.KeyValue{} // someone is ahead; findAhead says who
		if len(first) > 0 {
			c.ahead = first[0]
		}
	}
	return nil
}

// findAhead reads the key just ahead of c in the queue (the newest one
// created before it), as concurrency.Mutex's waitDeletes does, and in the
// same read whether c's own key is still there (c.gone).
func (l *Locker) findAhead(ctx context.Context, c *contender) error {
	opts := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMaxCreateRev(c.rev - 1)}, clientv3.WithLastCreate()...)
	start := time.Now()
	resp, err := l.client.Txn(ctx).Then(clientv3.OpGet(l.queue(c.name), opts...), clientv3.OpGet(c.key)).Commit()
	if err != nil {
		return l.opErr(ctx, err, true)
	}
	c.ahead, c.read, c.start = nil, resp.Header.Revision, start
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		c.ahead = kvs[0]
	}
	own := resp.Responses[1].GetResponseRange().Kvs
	c.gone = len(own) == 0 || own[0].CreateRevision != c.rev
	return nil
}

// granted turns a contender that is first in its queue into a lock.
func (l *Locker) granted(ctx context.Context, ttl time.Duration, c *contender) (*dlock.Lock, error) {
	validUntil := l.validUntil(c.s, c.start, ttl)
	if now := time.Now(); !validUntil.After(now) {
		l.abandon(ctx, c, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, no validity left of ttl %v)", c.name, dlock.ErrNotAcquired, now.Sub(c.start), ttl)
	}
	lock := driver.NewLock(c.name, lockToken(c.s.id, c.rev), uint64(c.rev), validUntil, &grant{l: l, slot: c.slot})
	l.mu.Lock()
	c.slot.rev, c.slot.validUntil, c.slot.lock = c.rev, validUntil, lock
	l.mu.Unlock()
	return lock, nil
}

// Acquire takes the lock on key, waiting in the queue while it is held: it
// puts its key at the end of key's queue once and watches the deletion of
// the key just ahead, so waiters are served in arrival order and a crashed
// holder's lease expiry wakes the next one, without polling. It returns
// errors as dlock.Acquire does; the retry options are accepted for
// compatibility (WithRetryCount(0) makes it TryAcquire) but waits do not
// poll. While waiting it keeps its lease alive; an outage of the cluster
// during the wait restarts the wait at the end of the queue.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...dlock.Option) (*dlock.Lock, error) {
	// dlock.Acquire validates the options and does the retries through
	// outages; this Locker's TryAcquire path is replaced by queueing, see
	// waiter.
	return dlock.Acquire(ctx, &waiter{l: l}, key, ttl, opts...)
}

// Do runs fn under the lock on key with auto-extension (see dlock.Do). It
// waits in the queue as Acquire does.
func (l *Locker) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...dlock.Option) error {
	return dlock.Do(ctx, &waiter{l: l}, key, ttl, fn, opts...)
}

// waiter is a Locker whose TryAcquire waits in key's queue until it is
// first, or until ctx ends.
type waiter struct{ l *Locker }

func (w *waiter) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	l := w.l
	if err := l.check(ctx, key, ttl); err != nil {
		return nil, err
	}
	var c *contender
	for retried := false; ; retried = true {
		sl, err := l.take(ctx, key, ttl)
		if err != nil {
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
		}
		c = &contender{slot: sl, s: sl.s, name: key, key: sl.key}
		err = l.enqueue(ctx, c)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			l.lose(sl.s)
			l.free(sl)
			continue
		}
		if err != nil {
			l.abandon(ctx, c, ttl)
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, l.opErr(ctx, err, true))
		}
		break
	}
	if c.ahead == nil {
		return l.granted(ctx, ttl, c)
	}
	// Keep the lease alive while waiting; the holder's Extend takes over.
	waitCtx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	keep := make(chan struct{})
	go func() {
		defer close(keep)
		t := time.NewTicker(max(time.Duration(c.s.seconds)*time.Second/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-waitCtx.Done():
				return
			case <-t.C:
				if _, err := l.renew(waitCtx, c.s, true); errors.Is(err, errLeaseGone) {
					stopWait()
					return
				}
			}
		}
	}()
	err := l.findAhead(waitCtx, c)
	for err == nil && c.ahead != nil && !c.gone {
		err = l.waitDelete(waitCtx, c)
	}
	stopWait()
	<-keep
	if err != nil || c.gone {
		l.abandon(ctx, c, ttl)
		switch {
		case c.gone && err == nil:
			// Being first counts only if our key is still there: it may
			// have been deleted during the wait by someone other than its
			// lease.
			err = fmt.Errorf("%w (its queue key was deleted during the wait)", dlock.ErrNotAcquired)
		case ctx.Err() == nil && waitCtx.Err() != nil:
			err = fmt.Errorf("%w (the wait's lease expired)", dlock.ErrNotAcquired)
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
	}
	if l.validUntil(c.s, time.Now(), ttl).Before(time.Now().Add(ttl / 2)) {
		// Less than half the TTL known to be left of the lease: renew it
		// so the holder gets its validity.
		if _, err := l.renew(ctx, c.s, true); err != nil {
			l.abandon(ctx, c, ttl)
			if errors.Is(err, errLeaseGone) {
				// It never held the lock: not ErrNotHeld, but a wait to
				// begin again on a new lease.
				err = fmt.Errorf("%w (the wait's lease expired: it queues again)", dlock.ErrNotAcquired)
			}
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
		}
	}
	return l.granted(ctx, ttl, c)
}

// NotifyRelease implements driver.ReleaseNotifier for waits through
// dlock.Acquire with this Locker's TryAcquire: the channel receives a value
// when a key in key's queue is deleted. Locker.Acquire and Locker.Do queue
// instead and do not need it.
func (l *Locker) NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func()) {
	if keys.Check(l.prefix, key) != nil {
		return nil, func() {}
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	wch := l.client.Watch(ctx, l.queue(key), clientv3.WithPrefix(), clientv3.WithFilterPut())
	go func() {
		defer close(done)
		for range wch {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() { cancel(); <-done }
}

// waitDelete waits until c.ahead is deleted, then looks for a new key
// ahead (one ahead of that may still be waiting, or may have been deleted
// already).
func (l *Locker) waitDelete(ctx context.Context, c *contender) error {
	ahead := string(c.ahead.Key)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for deleted := false; !deleted; {
		if beforeWatch != nil {
			beforeWatch(c.read)
		}
		wch := l.client.Watch(wctx, ahead, clientv3.WithRev(c.read+1))
		for resp := range wch {
			if resp.CompactRevision != 0 || resp.Err() != nil {
				break // compacted past c.read, or the watch failed: read again
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					deleted = true
				}
			}
			if deleted {
				break
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", dlock.ErrNotAcquired, context.Cause(ctx))
		}
		if !deleted {
			// Re-read from the current revision: the key may be gone.
			resp, err := l.client.Get(ctx, ahead)
			if err != nil {
				return l.opErr(ctx, err, true)
			}
			c.read = resp.Header.Revision
			deleted = len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != c.ahead.CreateRevision
		}
	}
	return l.findAhead(ctx, c)
}

// beforeWatch, when set (by tests), runs before each watch of the key
// ahead with the revision the watch starts after.
var beforeWatch func(read int64)

// abandon deletes the key of a contender that did not become a lock, in
// the background and within a short bound (it would otherwise block the
// queue), and then frees its name on its session. A deletion that fails
// is retried at each renewal of the session (see sweep), so the key ends
// with its lease at the latest, even while other locks keep the lease
// alive. The key is ours if it lives by our lease: its name is the lease
// id, and the session has one key per name.
func (l *Locker) abandon(ctx context.Context, c *contender, ttl time.Duration) {
	l.mu.Lock()
	c.slot.doomed = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(ttl, time.Second))
	go func() {
		defer cancel()
		l.delete(ctx, c.slot)
	}()
}

// delete deletes sl's key if it is still the one sl stands for, and then
// frees sl: a granted lock's by its create revision, an abandoned
// contender's by its lease.
func (l *Locker) delete(ctx context.Context, sl *slot) {
	l.mu.Lock()
	ours := clientv3.Compare(clientv3.CreateRevision(sl.key), "=", sl.rev)
	if sl.doomed {
		ours = clientv3.Compare(clientv3.LeaseValue(sl.key), "=", sl.s.id)
	}
	l.mu.Unlock()
	if _, err := l.client.Txn(ctx).If(ours).Then(clientv3.OpDelete(sl.key)).Commit(); err == nil {
		l.free(sl)
	}
}

func (l *Locker) check(ctx context.Context, key string, ttl time.Duration) error {
	if ctx == nil {
		return driver.Invalidf("nil context")
	}
	if err := keys.Check(l.prefix, key); err != nil {
		return err
	}
	return l.checkTTL(ttl)
}

func (l *Locker) checkTTL(ttl time.Duration) error {
	if err := driver.CheckTTL(ttl); err != nil {
		return err
	}
	if d := driver.Drift(ttl, l.driftFactor); ttl <= d {
		return driver.Invalidf("ttl %v: must exceed the clock-drift margin %v", ttl, d)
	}
	return nil
}

// opErr classifies an error of a call to the cluster: dlock.ErrUnavailable
// with the cluster's error, and also the context's error when it ended; an
// acquisition whose context ended matches dlock.ErrNotAcquired instead.
func (l *Locker) opErr(ctx context.Context, err error, acquiring bool) error {
	ne := &dlock.NodeError{Node: l.node, Err: err}
	if ctx.Err() != nil {
		if acquiring {
			return fmt.Errorf("%w: %w: %w", dlock.ErrNotAcquired, context.Cause(ctx), hide{ne})
		}
		return fmt.Errorf("%w: %w: %w", dlock.ErrUnavailable, context.Cause(ctx), hide{ne})
	}
	return fmt.Errorf("%w: %w", dlock.ErrUnavailable, ne)
}

// hide keeps a context error inside an etcd error from being matched
// twice; errors.As still finds the *dlock.NodeError.
type hide struct{ err *dlock.NodeError }

func (h hide) Error() string      { return h.err.Error() }
func (h hide) As(target any) bool { return errors.As(h.err, target) }

// leaseSeconds is the lease TTL for ttl: etcd leases count whole seconds,
// so ttl rounded up. The cluster may raise it to its minimum lease TTL.
// The lock's validity is still computed from ttl, so the lease outlives it.
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}
