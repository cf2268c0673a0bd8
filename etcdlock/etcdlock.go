package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// Locker takes locks on one etcd cluster through a clientv3 client. It is
// safe for concurrent use; create one per client and share it.
type Locker struct {
	client *clientv3.Client
	node   string         // how errors name the cluster
	cfg    backend.Config // the options every backend shares

	mu       sync.Mutex
	sessions map[int64][]*session // by lease TTL in seconds
	waits    map[string]*wait     // by lock name: waits of dlock.Acquire in progress
}

var (
	_ dlock.Locker           = (*Locker)(nil)
	_ driver.ReleaseNotifier = (*Locker)(nil)
)

// New returns a Locker over client. It sends nothing to the cluster.
func New(client *clientv3.Client, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, bridge.Invalidf("nil etcd client")
	}
	l := &Locker{client: client, node: strings.Join(client.Endpoints(), ","),
		cfg: backend.New(0, true), sessions: map[int64][]*session{}, waits: map[string]*wait{}}
	if err := backend.Apply(l, opts); err != nil {
		return nil, err
	}
	l.cfg.Done("etcd")
	return l, nil
}

// queue is the prefix under which the contenders for key have their keys,
// as in concurrency.NewMutex(session, prefix+key).
func (l *Locker) queue(key string) string { return l.cfg.Prefix + key + "/" }

// TryAcquire makes one attempt to take the lock on key for ttl: in one
// transaction, it creates its key under the session's lease if key's queue
// is empty, and reads the queue's first key otherwise. When another
// contender is first it has written nothing, and returns an error matching
// dlock.ErrNotAcquired. It returns dlock.ErrUnavailable when the cluster
// could not be reached (a *dlock.NodeError in the chain),
// dlock.ErrMisconfigured when it refused for good (see Errors in the
// package documentation) and dlock.ErrInvalid for bad arguments. While the
// Locker itself has a key in key's queue (a lock it holds or waits for, an
// attempt in flight), it answers ErrNotAcquired at once, without a
// request: it could not be first. While dlock.Acquire or dlock.Do waits
// for key with this Locker, its attempts wait in the queue instead (see
// NotifyRelease).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return l.cfg.Events.Attempt(ctx, key, func() (*dlock.Lock, error) { return l.tryAcquire(ctx, key, ttl) })
}

func (l *Locker) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := l.cfg.Check(ctx, key, ttl); err != nil {
		return nil, err
	}
	if lock, waiting, err := l.fromQueue(ctx, key, ttl); waiting {
		return lock, err
	}
	if l.queued(key) {
		return nil, fmt.Errorf("dlock: acquire %q: %w (this Locker holds it, waits for it or is taking it)", key, dlock.ErrNotAcquired)
	}
	c, err := l.put(ctx, key, ttl, l.tryPut)
	if err != nil {
		return nil, err
	}
	if c.ahead != nil {
		l.free(c.slot) // nothing was written
		return nil, fmt.Errorf("dlock: acquire %q: %w (held by another owner)", key, dlock.ErrNotAcquired)
	}
	return l.granted(ctx, ttl, c)
}

// put takes a slot for key and runs op (tryPut or enqueue) to put its key
// in key's queue, once more on a new lease when the cluster no longer has
// the session's. On another error the put's outcome is unknown, and the
// key is abandoned.
func (l *Locker) put(ctx context.Context, key string, ttl time.Duration, op func(context.Context, *contender) error) (*contender, error) {
	for retried := false; ; retried = true {
		sl, err := l.take(ctx, key, ttl)
		if err != nil {
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
		}
		c := &contender{slot: sl, s: sl.s, name: key, key: sl.key, identity: driver.Identity(ctx)}
		c.value = l.value(c.identity)
		err = op(ctx, c)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			// Revoked by someone else while we thought it alive: once
			// more, on a new lease.
			l.lose(sl.s)
			l.free(sl)
			continue
		}
		if err != nil {
			l.abandon(ctx, c)
			return nil, fmt.Errorf("dlock: acquire %q: %w", key, l.opErr(ctx, err, true))
		}
		return c, nil
	}
}

// contender is a key of ours in a lock's queue.
type contender struct {
	slot *slot
	s    *session
	name string // the lock's name, as the caller gave it
	key  string
	// value is the key's value: identity (driver.Identity) when it is not
	// empty, as `etcdctl elect` puts its proposal; else the holder record
	// or nothing (see holderValue).
	value, identity string
	rev             int64            // the key's create revision: the fence once it is first
	ahead           *mvccpb.KeyValue // the key just ahead of ours, nil when ours is first
	read            int64            // the revision at which ahead was read
	// start is the send time of the request that last saw the key first
	// in its queue, or created it (the lock's validity counts from it).
	start time.Time
	gone  bool // the last read found the key deleted
	// sem names the semaphore whose permit on slot permit the key is
	// (name is its slot's key); "" for a lock.
	sem    string
	permit int
}

// tryPut is TryAcquire's transaction: the put only if the queue is empty,
// else the read of its first key.
func (l *Locker) tryPut(ctx context.Context, c *contender) error {
	q := l.queue(c.name)
	empty := clientv3.Compare(clientv3.CreateRevision(q), "=", 0).WithPrefix()
	put := clientv3.OpPut(c.key, c.value, clientv3.WithLease(c.s.id))
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
	put := clientv3.OpPut(c.key, c.value, clientv3.WithLease(c.s.id))
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
// same read whether c's own key is still there (c.gone), in bounded
// attempts (see attempts).
func (l *Locker) findAhead(ctx context.Context, c *contender) error {
	opts := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMaxCreateRev(c.rev - 1)}, clientv3.WithLastCreate()...)
	var start time.Time
	var resp *clientv3.TxnResponse
	err := attempts(ctx, c.s.seconds, func(ctx context.Context) (err error) {
		start = time.Now()
		resp, err = l.client.Txn(ctx).Then(clientv3.OpGet(l.queue(c.name), opts...), clientv3.OpGet(c.key)).Commit()
		return err
	})
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
		l.abandon(ctx, c)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, no validity left of ttl %v)", c.name, dlock.ErrNotAcquired, now.Sub(c.start), ttl)
	}
	g, tok := &grant{l: l, slot: c.slot}, lockToken(c.s.id, c.rev)
	var lock *dlock.Lock
	if c.sem == "" {
		lock = driver.NewLock(c.name, tok, uint64(c.rev), validUntil, g)
	} else {
		lock = driver.NewPermit(c.sem, c.permit, tok, uint64(c.rev), validUntil, g)
	}
	l.mu.Lock()
	if c.s.dead { // revoked by Close, or found gone, after the put
		l.mu.Unlock()
		l.abandon(ctx, c)
		return nil, fmt.Errorf("dlock: acquire %q: %w (the lease was revoked or expired as the grant came)", c.name, dlock.ErrNotAcquired)
	}
	c.slot.rev, c.slot.validUntil, c.slot.lock = c.rev, validUntil, lock
	l.mu.Unlock()
	return lock, nil
}

// abandon deletes the key of a contender that did not become a lock, in
// the background and within a short bound (it would otherwise block the
// queue), and then frees its name on its session. A deletion that fails
// is retried at each renewal of the session (see sweep), so the key ends
// with its lease at the latest, even while other locks keep the lease
// alive. The key is ours if it lives by our lease: its name is the lease
// id, and the session has one key per name.
func (l *Locker) abandon(ctx context.Context, c *contender) {
	l.mu.Lock()
	c.slot.doomed = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(time.Duration(c.s.seconds)*time.Second, time.Second))
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

// opErr classifies an error of a call to the cluster (nodeerr.Error): an
// acquisition whose context ended matches dlock.ErrNotAcquired.
func (l *Locker) opErr(ctx context.Context, err error, acquiring bool) error {
	return nodeerr.Error(ctx, l.node, err, kind(err), acquiring)
}

// kind says what kind of failure err, the error of an etcd client call,
// is: a refusal that retrying cannot change (nodeerr.Refused: auth is on
// and the client has no user, or one without the permission; the cluster's
// space quota is full), another error the cluster sent (nodeerr.Answered),
// or no answer.
func kind(err error) nodeerr.Kind {
	ee := rpctypes.Error(err)
	switch {
	case !errors.As(ee, new(rpctypes.EtcdError)):
		return nodeerr.Unreachable
	case slices.Contains(refusals, ee):
		return nodeerr.Refused
	}
	return nodeerr.Answered
}

var refusals = []error{rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed, rpctypes.ErrPermissionDenied,
	rpctypes.ErrUserNotFound, rpctypes.ErrRoleNotGranted, rpctypes.ErrNoSpace}

// leaseSeconds is the lease TTL for ttl: etcd leases count whole seconds,
// so ttl rounded up. The cluster may raise it to its minimum lease TTL.
// The lock's validity is still computed from ttl, so the lease outlives it.
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}
