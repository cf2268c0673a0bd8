package etcdlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// wait is the Locker's waits for one lock name through dlock.Acquire (see
// NotifyRelease): the waiters' channels, in arrival order, and the
// Locker's places in the name's queue, oldest first. Its fields are
// guarded by the Locker's mu.
type wait struct {
	name    string
	waiters []chan struct{}
	places  []*place
	adding  int // places being put in the queue, or taken
}

// place is one of the Locker's keys in a lock's queue, kept for its waits:
// a goroutine (keep) keeps its lease alive and watches the key ahead until
// the key is first. c is keep's until done is closed; ready and over are
// guarded by the Locker's mu.
type place struct {
	c     *contender
	w     *wait
	ready bool // the key is first in its queue
	over  bool // the key or its lease is gone: the place is worth nothing
	stop  context.CancelFunc
	done  chan struct{}
}

// NotifyRelease implements driver.ReleaseNotifier. It registers a wait of
// dlock.Acquire or dlock.Do for the lock on key, and makes this Locker's
// TryAcquire of key wait in key's queue, as concurrency.Mutex does: its
// first attempt puts a key at the end of the queue; then a goroutine keeps
// the key's lease alive and watches the deletion of the key just ahead of
// it, and the channel receives a value once the key is first (or gone, for
// the next attempt to queue again); an attempt takes the lock when the key
// is first, and otherwise answers dlock.ErrNotAcquired without a request.
// So waiters are served in the order they queued, across Lockers, a
// crashed holder's lease expiry wakes the next one, and no wait polls the
// cluster (beside a read of the queue at each renewal of its lease, in
// case the watch went to a member that answers nothing). A Locker keeps as
// many keys in the queue as it has waits registered on key: they take its
// keys in queue order, whichever of them tries first. stop ends the wait,
// deletes the Locker's key that it leaves unused, and must be called
// exactly once.
func (l *Locker) NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func()) {
	if l.cfg.CheckKey(key) != nil {
		return nil, func() {}
	}
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	w := l.waits[key]
	if w == nil {
		w = &wait{name: key}
		l.waits[key] = w
	}
	w.waiters = append(w.waiters, ch)
	l.mu.Unlock()
	return ch, func() { l.leave(ctx, w, ch) }
}

// leave ends the wait of ch, and drops the places that w has beyond its
// waiters, the youngest first: it deletes their keys.
func (l *Locker) leave(ctx context.Context, w *wait, ch chan struct{}) {
	l.mu.Lock()
	w.waiters = slices.DeleteFunc(w.waiters, func(x chan struct{}) bool { return x == ch })
	var drop []*place
	for len(w.places) > len(w.waiters) {
		drop = append(drop, w.places[len(w.places)-1])
		w.places = w.places[:len(w.places)-1]
	}
	if len(w.waiters) == 0 && l.waits[w.name] == w {
		delete(l.waits, w.name)
	}
	l.mu.Unlock()
	for _, p := range drop {
		p.end()
		l.mu.Lock()
		over := p.over
		l.mu.Unlock()
		if over {
			l.free(p.c.slot)
		} else {
			l.abandon(ctx, p.c)
		}
	}
}

// fromQueue is TryAcquire of a name the Locker waits for (see
// NotifyRelease): it takes the Locker's oldest place in the name's queue
// when it is first, or puts a new one at the end of the queue when the
// waits have fewer places than waiters, or else answers ErrNotAcquired
// without a request. ok is false when no wait is registered on key.
func (l *Locker) fromQueue(ctx context.Context, key string, ttl time.Duration) (lock *dlock.Lock, ok bool, err error) {
	l.mu.Lock()
	w := l.waits[key]
	if w == nil {
		l.mu.Unlock()
		return nil, false, nil
	}
	w.places = slices.DeleteFunc(w.places, func(p *place) bool {
		if p.over {
			l.freeLocked(p.c.slot) // its key is gone
		}
		return p.over
	})
	if len(w.places) > 0 && w.places[0].ready {
		p := w.places[0]
		w.places = w.places[1:]
		w.adding++ // counted until taken, so that no other wait adds one for it
		l.mu.Unlock()
		p.end()
		lock, err := l.takePlace(ctx, p, ttl)
		l.mu.Lock()
		w.adding--
		l.mu.Unlock()
		return lock, true, err
	}
	if len(w.places)+w.adding >= len(w.waiters) {
		l.mu.Unlock()
		return nil, true, fmt.Errorf("dlock: acquire %q: %w (queued behind another owner)", key, dlock.ErrNotAcquired)
	}
	w.adding++
	l.mu.Unlock()
	lock, err = l.addPlace(ctx, w, key, ttl)
	return lock, true, err
}

// addPlace puts a key of the Locker's at the end of key's queue for w: a
// lock at once when it is first, else a place that keep looks after.
func (l *Locker) addPlace(ctx context.Context, w *wait, key string, ttl time.Duration) (*dlock.Lock, error) {
	c, err := l.put(ctx, key, ttl, l.enqueue)
	l.mu.Lock()
	w.adding--
	switch {
	case err != nil:
		l.mu.Unlock()
		return nil, err
	case c.ahead == nil:
		l.mu.Unlock()
		return l.granted(ctx, ttl, c)
	case l.waits[key] != w || len(w.places) >= len(w.waiters):
		l.mu.Unlock()
		l.abandon(ctx, c) // its wait ended meanwhile
		return nil, fmt.Errorf("dlock: acquire %q: %w (the wait ended)", key, dlock.ErrNotAcquired)
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p := &place{c: c, w: w, stop: stop, done: make(chan struct{})}
	i, _ := slices.BinarySearchFunc(w.places, c.rev, func(p *place, rev int64) int { return cmp.Compare(p.c.rev, rev) })
	w.places = slices.Insert(w.places, i, p)
	l.mu.Unlock()
	go l.keep(pctx, p)
	return nil, fmt.Errorf("dlock: acquire %q: %w (queued behind another owner)", key, dlock.ErrNotAcquired)
}

// takePlace makes a lock of a place found first in its queue. Its validity
// counts from now, the key being first and alive: when less than half of
// ttl is known to be left of its lease, the lease is renewed first, and a
// lease found gone ends the attempt with ErrNotAcquired: the waiter never
// held the lock, and its next attempt queues again with a new lease.
func (l *Locker) takePlace(ctx context.Context, p *place, ttl time.Duration) (*dlock.Lock, error) {
	c := p.c
	if id := driver.Identity(ctx); id != c.identity {
		// Another wait of this Locker queued the key, with its identity.
		if err := l.proclaim(ctx, c, id); err != nil {
			return nil, err
		}
	}
	c.start = time.Now()
	if l.validUntil(c.s, c.start, ttl).Before(c.start.Add(ttl / 2)) {
		if _, err := l.renew(ctx, c.s, true); err != nil {
			if errors.Is(err, errLeaseGone) {
				l.free(c.slot)
				return nil, fmt.Errorf("dlock: acquire %q: %w (the wait's lease expired: it queues again)", c.name, dlock.ErrNotAcquired)
			}
			l.abandon(ctx, c)
			return nil, fmt.Errorf("dlock: acquire %q: %w", c.name, err)
		}
	}
	return l.granted(ctx, ttl, c)
}

// proclaim makes c's key publish identity id (driver.Identity) instead of
// the one of the wait that queued it, keeping its lease and its create
// revision (its place and fence), as concurrency.Election's Proclaim does.
// A key found gone ends the attempt with ErrNotAcquired: the next one
// queues again.
func (l *Locker) proclaim(ctx context.Context, c *contender, id string) error {
	value := l.value(id)
	ours := clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.rev)
	resp, err := l.client.Txn(ctx).If(ours).Then(clientv3.OpPut(c.key, value, clientv3.WithIgnoreLease())).Commit()
	switch {
	case err != nil:
		l.abandon(ctx, c)
		return fmt.Errorf("dlock: acquire %q: %w", c.name, l.opErr(ctx, err, true))
	case !resp.Succeeded:
		l.free(c.slot)
		return fmt.Errorf("dlock: acquire %q: %w (the wait's key is gone: it queues again)", c.name, dlock.ErrNotAcquired)
	}
	c.value, c.identity = value, id
	return nil
}

// end stops p's goroutine and waits for it.
func (p *place) end() {
	p.stop()
	<-p.done
}

// keep keeps p's lease alive and watches the key ahead of p's key until p's
// is first (ready), and then keeps the lease alive until p is taken or
// dropped (ctx ends). It marks p over and returns when its key or its lease
// is gone. At each renewal it also reads the queue again, so that a watch
// on a member that answers nothing does not hold up the wait.
func (l *Locker) keep(ctx context.Context, p *place) {
	defer close(p.done)
	c := p.c
	tick := time.NewTicker(max(time.Duration(c.s.seconds)*time.Second/3, 100*time.Millisecond))
	defer tick.Stop()
	var ahead aheadWatch
	defer ahead.stop()
	look, ready := true, false
	for {
		if look && !ready {
			switch err := l.findAhead(ctx, c); {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil: // read again at the next renewal
			case c.gone:
				l.mark(p, &p.over)
				return
			case c.ahead == nil:
				ready = true
				ahead.stop()
				l.mark(p, &p.ready)
			default:
				ahead.follow(ctx, l.client, c)
			}
		}
		select {
		case <-ctx.Done():
			return
		case resp, open := <-ahead.ch:
			look = ahead.ended(resp, open)
		case <-tick.C:
			if _, err := l.renew(ctx, c.s, true); errors.Is(err, errLeaseGone) {
				l.mark(p, &p.over)
				return
			}
			look = true
		}
	}
}

// mark sets flag, one of p's, and tells p's waiters.
func (l *Locker) mark(p *place, flag *bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*flag = true
	for _, ch := range p.w.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// aheadWatch is keep's watch of the key ahead of its place.
type aheadWatch struct {
	key    string
	rev    int64 // the key's create revision
	ch     clientv3.WatchChan
	cancel context.CancelFunc
}

// follow watches c.ahead from the revision after c.read, unless it already
// watches that key.
func (w *aheadWatch) follow(ctx context.Context, cli *clientv3.Client, c *contender) {
	if w.ch != nil && w.key == string(c.ahead.Key) && w.rev == c.ahead.CreateRevision {
		return
	}
	w.stop()
	if beforeWatch != nil {
		beforeWatch(c.read)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w.key, w.rev, w.cancel = string(c.ahead.Key), c.ahead.CreateRevision, cancel
	w.ch = cli.Watch(wctx, w.key, clientv3.WithRev(c.read+1))
}

// ended reports whether a response of the watch (or its end, when !open)
// calls for a new read of the queue: the key ahead was deleted, or the
// watch failed (then it is dropped, to be started again after the read).
// A put on the key ahead (its lease changed) calls for nothing.
func (w *aheadWatch) ended(resp clientv3.WatchResponse, open bool) bool {
	if !open || resp.Err() != nil || resp.Canceled || resp.CompactRevision != 0 {
		w.stop()
		return true
	}
	for _, ev := range resp.Events {
		if ev.Type == clientv3.EventTypeDelete {
			return true
		}
	}
	return false
}

func (w *aheadWatch) stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.ch, w.cancel = nil, nil
}

// beforeWatch, when set (by tests), runs before each watch of the key
// ahead with the revision the watch starts after.
var beforeWatch func(read int64)
