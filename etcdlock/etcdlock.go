package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
		driftFactor: driver.DefaultDriftFactor, logger: slog.Default()}
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

// TryAcquire makes one attempt to take the lock on key for ttl: it grants a
// lease, creates the contender key under it in a transaction only if absent
// and reads the queue's first key in the same transaction. When another
// contender is first, it revokes the lease (deleting its key) and returns an
// error matching dlock.ErrNotAcquired. It returns dlock.ErrUnavailable when
// the cluster could not be reached (a *dlock.NodeError in the chain) and
// dlock.ErrInvalid for bad arguments.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := l.check(ctx, key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	c, err := l.enqueue(ctx, key, ttl)
	if err != nil {
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
	}
	if c.ahead != nil {
		// Revoked before returning, not in the background: a caller that
		// exits right after the refusal (dlock run -n) would leave its key
		// in the queue, ahead of every later contender, for its TTL.
		if _, err := l.client.Revoke(ctx, c.lease); err != nil {
			l.abandon(ctx, c.lease, ttl)
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner)", key, dlock.ErrNotAcquired)
	}
	return l.granted(ctx, key, ttl, start, c)
}

// contender is a key of ours in a lock's queue.
type contender struct {
	lease clientv3.LeaseID
	key   string
	rev   int64            // the key's create revision: the fence once it is first
	ahead *mvccpb.KeyValue // the key just ahead of ours, nil when ours is first
	read  int64            // the revision at which ahead was read
}

// enqueue grants a lease for ttl and puts a key under it at the end of key's
// queue. On error no key of ours remains (the lease is revoked).
func (l *Locker) enqueue(ctx context.Context, key string, ttl time.Duration) (*contender, error) {
	lease, err := l.client.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, l.opErr(ctx, err, true)
	}
	c := &contender{lease: lease.ID, key: l.queue(key) + token(lease.ID)}
	// As concurrency.Mutex does: the put and the read of the queue's first
	// key in one transaction, so "first" is decided at the put's revision.
	cmp := clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)
	put := clientv3.OpPut(c.key, "", clientv3.WithLease(lease.ID))
	get := clientv3.OpGet(c.key)
	owner := clientv3.OpGet(l.queue(key), clientv3.WithFirstCreate()...)
	resp, err := l.client.Txn(ctx).If(cmp).Then(put, owner).Else(get, owner).Commit()
	if err != nil {
		l.abandon(ctx, lease.ID, ttl)
		return nil, l.opErr(ctx, err, true)
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
	return c, nil
}

// findAhead reads the key just ahead of c in the queue (the newest one
// created before it), as concurrency.Mutex's waitDeletes does.
func (l *Locker) findAhead(ctx context.Context, key string, c *contender) error {
	opts := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMaxCreateRev(c.rev - 1)}, clientv3.WithLastCreate()...)
	resp, err := l.client.Get(ctx, l.queue(key), opts...)
	if err != nil {
		return l.opErr(ctx, err, true)
	}
	c.ahead, c.read = nil, resp.Header.Revision
	if len(resp.Kvs) > 0 {
		c.ahead = resp.Kvs[0]
	}
	return nil
}

// granted turns a contender that is first in its queue into a lock.
func (l *Locker) granted(ctx context.Context, key string, ttl time.Duration, start time.Time, c *contender) (*dlock.Lock, error) {
	validUntil := driver.ValidUntil(start, ttl, l.driftFactor)
	if elapsed := time.Since(start); !validUntil.After(start.Add(elapsed)) {
		l.abandon(ctx, c.lease, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, no validity left of ttl %v)", key, dlock.ErrNotAcquired, elapsed, ttl)
	}
	g := &grant{l: l, key: c.key, lease: c.lease}
	return driver.NewLock(key, token(c.lease), uint64(c.rev), validUntil, g), nil
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
	c, err := l.enqueue(ctx, key, ttl)
	if err != nil {
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
	}
	// Keep the lease alive while waiting; the holder's Extend takes over.
	waitCtx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	keep := make(chan struct{})
	go func() {
		defer close(keep)
		t := time.NewTicker(max(time.Duration(leaseSeconds(ttl))*time.Second/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-waitCtx.Done():
				return
			case <-t.C:
				if _, err := l.client.KeepAliveOnce(waitCtx, c.lease); err != nil && waitCtx.Err() == nil {
					if errors.Is(err, rpctypes.ErrLeaseNotFound) {
						stopWait()
						return
					}
				}
			}
		}
	}()
	if c.ahead != nil {
		err = l.findAhead(waitCtx, key, c)
	}
	for err == nil && c.ahead != nil {
		err = l.waitDelete(waitCtx, key, c)
	}
	if err != nil {
		stopWait()
		<-keep
		l.abandon(ctx, c.lease, ttl)
		if ctx.Err() == nil && waitCtx.Err() != nil {
			err = fmt.Errorf("%w (the wait's lease expired)", dlock.ErrNotAcquired)
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
	}
	stopWait()
	<-keep
	// Refresh the lease so the holder gets its whole TTL from now.
	start := time.Now()
	if _, err := l.client.KeepAliveOnce(ctx, c.lease); err != nil {
		l.abandon(ctx, c.lease, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, l.opErr(ctx, err, true))
	}
	// Being first counts only if our key is still there: it may have been
	// deleted during the wait by someone other than its lease.
	resp, err := l.client.Get(ctx, c.key)
	if err != nil {
		l.abandon(ctx, c.lease, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, l.opErr(ctx, err, true))
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != c.rev {
		l.abandon(ctx, c.lease, ttl)
		return nil, fmt.Errorf("dlock: acquire %q: %w (its queue key was deleted during the wait)", key, dlock.ErrNotAcquired)
	}
	return l.granted(ctx, key, ttl, start, c)
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
func (l *Locker) waitDelete(ctx context.Context, key string, c *contender) error {
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
	return l.findAhead(ctx, key, c)
}

// beforeWatch, when set (by tests), runs before each watch of the key
// ahead with the revision the watch starts after.
var beforeWatch func(read int64)

// abandon revokes a lease whose key did not become a lock, in the
// background and within a short bound: its key would otherwise block the
// queue until the lease expired.
func (l *Locker) abandon(ctx context.Context, lease clientv3.LeaseID, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(ttl, time.Second))
	go func() {
		defer cancel()
		_, _ = l.client.Revoke(ctx, lease)
	}()
}

// ReleaseToken releases the lock on key if it still holds token (the lease
// id, in hex, as Lock.Token returns it). It returns an error matching
// dlock.ErrNotHeld when key does not hold token.
func (l *Locker) ReleaseToken(ctx context.Context, key, tok string) error {
	g, err := l.tokenGrant(ctx, key, tok)
	if err != nil {
		return err
	}
	if err := g.Release(ctx); err != nil {
		return fmt.Errorf("dlock: release %q: %w", key, err)
	}
	return nil
}

// ExtendToken renews the lease of the lock on key if it still holds token
// (see ReleaseToken). It returns an error matching dlock.ErrNotHeld when
// key does not hold token.
func (l *Locker) ExtendToken(ctx context.Context, key, tok string, ttl time.Duration) error {
	g, err := l.tokenGrant(ctx, key, tok)
	if err != nil {
		return err
	}
	if _, err := g.Extend(ctx, ttl); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", key, err)
	}
	return nil
}

func (l *Locker) tokenGrant(ctx context.Context, key, tok string) (*grant, error) {
	if ctx == nil {
		return nil, driver.Invalidf("nil context")
	}
	if err := keys.Check(l.prefix, key); err != nil {
		return nil, err
	}
	if err := driver.CheckToken(key, tok); err != nil {
		return nil, err
	}
	id, err := strconv.ParseUint(tok, 16, 63)
	if err != nil || id == 0 || token(clientv3.LeaseID(id)) != tok {
		return nil, driver.Invalidf("token %q: not an etcd lease id in hex", tok)
	}
	return &grant{l: l, key: l.queue(key) + tok, lease: clientv3.LeaseID(id)}, nil
}

// grant is one held lock's connection to the cluster: its key and the
// lease the key lives by.
type grant struct {
	l     *Locker
	key   string
	lease clientv3.LeaseID
}

// Extend renews the lease once and checks that the key is still there. The
// lease's TTL was fixed when it was granted, so the new validity is the
// shorter of ttl and that TTL.
func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	l := g.l
	if err := l.checkTTL(ttl); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	ka, err := l.client.KeepAliveOnce(ctx, g.lease)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return time.Time{}, fmt.Errorf("%w (the lease expired or was revoked)", dlock.ErrNotHeld)
		}
		return time.Time{}, l.opErr(ctx, err, false)
	}
	resp, err := l.client.Get(ctx, g.key, clientv3.WithCountOnly())
	if err != nil {
		return time.Time{}, l.opErr(ctx, err, false)
	}
	if resp.Count == 0 {
		return time.Time{}, fmt.Errorf("%w (the key was deleted)", dlock.ErrNotHeld)
	}
	return driver.ValidUntil(start, min(ttl, time.Duration(ka.TTL)*time.Second), l.driftFactor), nil
}

// Release revokes the lease, which deletes the key (its name is the lease
// id, so it lives by no other lease) and wakes the next waiter: one Raft
// commit, where deleting the key and then revoking took two. A linearizable
// read first tells whether the key was still ours.
func (g *grant) Release(ctx context.Context) error {
	l := g.l
	resp, err := l.client.Get(ctx, g.key)
	if err != nil {
		return l.opErr(ctx, err, false)
	}
	held := len(resp.Kvs) == 1 && clientv3.LeaseID(resp.Kvs[0].Lease) == g.lease
	if _, err := l.client.Revoke(ctx, g.lease); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w (the lease expired or was revoked)", dlock.ErrNotHeld)
		}
		return l.opErr(ctx, err, false)
	}
	if !held {
		return fmt.Errorf("%w (the lease expired or another owner holds the key)", dlock.ErrNotHeld)
	}
	return nil
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

// token is how a lock's lease id is written in its key and token: lower
// case hex, as concurrency.Mutex writes it.
func token(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }
