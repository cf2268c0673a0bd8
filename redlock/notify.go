package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/wake"
)

// Wake-on-release, per node
//
// The single-node scheme of redislock (see internal/wake), run on every
// node: a waiting Acquire that finds a key busy puts its Locker's id in the
// key's waiter queue, "dlock:waiters:{key}", on every node where the Locker
// is subscribed to its channel "dlock:wake:<id>". Releasing a lock on a node
// deletes the key, pops that node's queue head and publishes the key on the
// head's channel, in the release script's one round trip. The Locker holds
// one pub/sub connection per node, opened the first time a waiting attempt
// finds the key busy there, and the first announcement from any node wakes
// its earliest local waiter for the key. Several nodes announcing the same
// release wake it once (a pending wake-up absorbs the others).
//
// The queue commands travel in the same pipeline as the acquire script: one
// script queues the Locker before the attempt (so a release right after a
// busy reply is announced), another unqueues it after a grant on that node
// (or moves it to the tail when more local waiters remain). An announcement
// is only a hint; waits poll at the retry delay plus jitter as before, which
// covers peers that release without publishing (node-redlock), lost
// messages and dead nodes. Nobody announces an expiry (a holder that
// crashed), so the queueing script also answers when the key expires on a
// node whose queue the Locker heads, and a refused attempt there makes the
// Locker's earliest waiter retry then by itself.

// enqueue: KEYS[1] queue, KEYS[2] lock key; ARGV[1] Locker id, ARGV[2]
// earlier place (0 = none: the tail), ARGV[3] queue ttl ms. Returns the
// Locker's place and, when it heads the queue, the lock key's PTTL (ms;
// negative when the key is free or never expires), else -1.
var enqueue = redis.NewScript(`
local place = tonumber(ARGV[2])
if place == 0 then
  local last = redis.call('zrevrange', KEYS[1], 0, 0, 'withscores')
  place = 1
  if last[2] then place = tonumber(last[2]) + 1 end
end
redis.call('zadd', KEYS[1], 'nx', place, ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[3])
local expires = -1
if redis.call('zrange', KEYS[1], 0, 0)[1] == ARGV[1] then
  expires = redis.call('pttl', KEYS[2])
end
return {tonumber(redis.call('zscore', KEYS[1], ARGV[1])), expires}
`)

// dequeue: KEYS[1] lock key, KEYS[2] queue; ARGV[1] token, ARGV[2] Locker
// id, ARGV[3] "1" when more local waiters remain, ARGV[4] queue ttl ms.
// Returns -1 when the node did not grant (the place stands), else the new
// place (0: not queued).
var dequeue = redis.NewScript(`
if redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('zrem', KEYS[2], ARGV[2])
if ARGV[3] ~= '1' then return 0 end
local last = redis.call('zrevrange', KEYS[2], 0, 0, 'withscores')
local place = 1
if last[2] then place = tonumber(last[2]) + 1 end
redis.call('zadd', KEYS[2], place, ARGV[2])
redis.call('pexpire', KEYS[2], ARGV[4])
return place
`)

var _ dlock.ReleaseNotifier = (*Locker)(nil)

// notifier is a Locker's subscriptions (one per node) and the registry of
// its waiting Acquires. It is safe for concurrent use.
type notifier struct {
	l     *Locker
	id    string
	wake  string
	mu    sync.Mutex
	subs  []*wake.Sub // per node; nil while not subscribed there
	byKey map[string]*interest
	idle  time.Time
	// closed is set by Close: no new subscriptions.
	closed bool
	wg     sync.WaitGroup // unqueue clean-ups
}

// interest is this Locker's wait for one lock key (with prefix).
type interest struct {
	waiters []*waiter  // in arrival order
	place   []int64    // per node: the place in the key's queue, 0 = not queued
	retry   wake.Retry // at the expiry of the lock it waits behind
}

// expired fires a pending retry.
func (n *notifier) expired(in *interest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if in.retry.Take() && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
}

type waiter struct {
	ch   chan struct{}
	n    *notifier
	full string
	in   *interest
	left bool // guarded by n.mu
}

func newNotifier(l *Locker) *notifier {
	id := dlock.NewToken()
	return &notifier{l: l, id: id, wake: wake.ChannelPrefix + id, subs: make([]*wake.Sub, len(l.nodes)), byKey: map[string]*interest{}}
}

// NotifyRelease implements dlock.ReleaseNotifier: the channel receives a
// value when the lock on key may have been released on some node, so a
// waiting Acquire retries at once instead of at its next poll. It sends
// nothing; the subscription to a node opens when a waiting attempt first
// finds the key busy there. stop must be called exactly once. After Close
// the channel never fires and waits poll.
func (l *Locker) NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func()) {
	n := l.notify
	if dlock.CheckKey(key) != nil {
		return nil, func() {}
	}
	w := &waiter{ch: make(chan struct{}, 1), n: n, full: l.prefix + key}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, func() {}
	}
	in := n.byKey[w.full]
	if in == nil {
		in = &interest{place: make([]int64, len(l.nodes))}
		n.byKey[w.full] = in
	}
	w.in = in
	in.waiters = append(in.waiters, w)
	return w.ch, func() { n.leave(w) }
}

// Close stops the Locker's subscriptions to release announcements (one
// pub/sub connection and goroutine per node, opened by waiting Acquires,
// and otherwise closed when the clients are closed or after 30s without
// waiters). Waits in progress and later ones fall back to polling; locks
// keep working. Close also waits for releases still under way on some nodes
// (Release returns once a majority deleted; see the package documentation),
// at most about two node timeouts: a program that exits right after
// releasing should call Close first, or the slower nodes keep the key until
// its TTL. Close does not close the clients. It is safe to call more than
// once and concurrently with other methods, and returns nil.
func (l *Locker) Close() error {
	l.releasing.Range(func(_, v any) bool {
		<-v.(*progress).done
		return true
	})
	n := l.notify
	n.mu.Lock()
	n.closed = true
	for _, in := range n.byKey {
		in.retry.Cancel()
	}
	subs := append([]*wake.Sub(nil), n.subs...)
	clear(n.subs)
	n.mu.Unlock()
	for _, s := range subs {
		if s != nil {
			s.Close()
		}
	}
	n.wg.Wait()
	l.workers.close()
	return nil
}

// leave ends w's wait. An unused wake-up passes to the next local waiter;
// when the last waiter leaves, the Locker's queue entries are removed (best
// effort) so later releases are not announced to nobody.
func (n *notifier) leave(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.left {
		return
	}
	w.left = true
	in := w.in
	for i, x := range in.waiters {
		if x == w {
			in.waiters = append(in.waiters[:i], in.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.ch:
		if len(in.waiters) > 0 {
			signal(in.waiters[0])
		}
	default:
	}
	if len(in.waiters) > 0 || n.byKey[w.full] != in {
		return
	}
	delete(n.byKey, w.full)
	in.retry.Cancel()
	if len(n.byKey) == 0 {
		n.idle = time.Now()
	}
	if n.closed {
		return // no goroutine after Close; the entries expire with the queue
	}
	queue := wake.QueueKey(w.full)
	for i, p := range in.place {
		if p == 0 {
			continue
		}
		c := n.l.nodes[i].client
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = c.ZRem(ctx, queue, n.id).Err() // best effort
		}()
	}
}

// waitPlan is what a waiting attempt sends to node i beyond the acquire
// script.
type waitPlan struct {
	in    *interest
	queue string
	place []int64 // snapshot per node; -1: not subscribed there, don't queue
	keep  string
}

// plan returns the queueing plan for an attempt on full, or nil when no
// local Acquire waits for it.
func (n *notifier) plan(full string) *waitPlan {
	n.mu.Lock()
	defer n.mu.Unlock()
	in := n.byKey[full]
	if in == nil || len(in.waiters) == 0 || n.closed {
		return nil
	}
	p := &waitPlan{in: in, queue: wake.QueueKey(full), place: make([]int64, len(in.place)), keep: "0"}
	if len(in.waiters) > 1 {
		p.keep = "1"
	}
	for i := range p.place {
		p.place[i] = -1
		if s := n.subs[i]; s != nil && s.Subscribed() {
			p.place[i] = in.place[i]
		}
	}
	return p
}

// attempt runs the acquire script on node i for a waiting Acquire: with
// the queue scripts around it in one pipeline when subscribed there, else
// alone; a busy reply then opens the subscription.
// argv is the acquire script's (scripts.Function.Argv).
func (n *notifier) attempt(ctx context.Context, i int, p *waitPlan, full, token string, argv []any) ([]any, error) {
	c, fs := n.l.nodes[i].client, &n.l.nodes[i].funcs
	if p.place[i] < 0 {
		v, err := scripts.RedlockAcquire.Run(ctx, c, fs, argv).Slice()
		if st, ok := status(v); err == nil && ok && st != 1 {
			n.listen(i, full)
		}
		return v, err
	}
	pipe := c.Pipeline()
	enq := enqueue.Eval(ctx, pipe, []string{p.queue, full}, n.id, p.place[i], wake.QueueTTL)
	acq := scripts.RedlockAcquire.Pipe(ctx, pipe, fs, argv)
	deq := dequeue.Eval(ctx, pipe, []string{full, p.queue}, token, n.id, p.keep, wake.QueueTTL)
	_, _ = pipe.Exec(ctx)
	v, err := acq.Slice()
	if scripts.Missing(err) {
		// The server lost its functions or its script cache: load and
		// call again, then unqueue.
		v, err = scripts.RedlockAcquire.Run(ctx, c, fs, argv).Slice()
		if err == nil {
			deq = dequeue.Eval(ctx, c, []string{full, p.queue}, token, n.id, p.keep, wake.QueueTTL)
		}
	}
	place, expires := p.place[i], int64(-1)
	if x, e := enq.Int64Slice(); e == nil && len(x) == 2 {
		place, expires = x[0], x[1]
	}
	if x, e := deq.Int64(); e == nil && x >= 0 {
		place = x
	}
	n.mu.Lock()
	if n.byKey[full] == p.in {
		p.in.place[i] = place
		if st, ok := status(v); err == nil && ok && st == 0 && expires >= 0 && !n.closed {
			// Refused by a lock that expires, on a node whose queue this
			// Locker heads: if nobody releases it (its holder crashed),
			// retry as it expires.
			due := time.Now().Add(wake.AfterExpiry(expires))
			p.in.retry.At(due, func() { n.expired(p.in) })
		}
	}
	n.mu.Unlock()
	return v, err
}

// status returns the acquire script's status, its reply's first element
// (1 granted, 0 busy, -1 busy without expiry).
func status(v []any) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	x, ok := v[0].(int64)
	return x, ok
}

// listen opens the subscription on node i unless it is open or the Locker
// has no waiter for full.
func (n *notifier) listen(i int, full string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if in := n.byKey[full]; n.subs[i] != nil || n.closed || in == nil || len(in.waiters) == 0 {
		return
	}
	n.subs[i] = wake.Start(n.l.nodes[i].client, n.wake, nodeHandler{n, i})
}

// nodeHandler receives node i's subscription events.
type nodeHandler struct {
	n *notifier
	i int
}

// Subscribed: a confirmation (the first, or after a reconnect) wakes every
// waiter once, to queue on this node or because announcements may have
// been lost.
func (h nodeHandler) Subscribed(s *wake.Sub, ok bool) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !ok || n.subs[h.i] != s {
		return
	}
	for _, in := range n.byKey {
		for _, w := range in.waiters {
			signal(w)
		}
	}
}

// Message: the Locker was a queue's head when the key was released.
func (h nodeHandler) Message(_ *wake.Sub, full string) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if in := n.byKey[full]; in != nil && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
}

// Idle forgets the subscription after wake.IdleClose without waiters.
func (h nodeHandler) Idle(s *wake.Sub) bool {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs[h.i] != s {
		return true
	}
	if len(n.byKey) > 0 || time.Since(n.idle) < wake.IdleClose {
		return false
	}
	n.subs[h.i] = nil
	return true
}

// Gone forgets a subscription whose client was closed.
func (h nodeHandler) Gone(s *wake.Sub) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs[h.i] == s {
		n.subs[h.i] = nil
	}
}

// signal wakes w unless a wake-up is already pending.
func signal(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}
