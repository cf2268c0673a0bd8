package redislock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/wake"
)

// Wake-on-release
//
// A waiting Acquire (dlock.Acquire, Do) that finds a key busy puts its Locker
// in a queue beside the lock key: a sorted set, "dlock:waiters:{key}", whose
// members are Locker ids in arrival order. The release script deletes the
// lock, pops the head of that queue and publishes the lock key on the
// head's own channel, "dlock:wake:<id>". So a release wakes exactly one
// Locker, the one that has waited longest, and costs no extra round trip;
// that Locker wakes its earliest local waiter, which retries at once. A
// woken waiter that loses the race (to a poll or a newcomer) goes back to
// its old place in the queue, so it is not pushed behind later arrivals.
//
// Every Locker has one pub/sub connection for all its keys (one SUBSCRIBE
// to its own channel), opened the first time a waiting Acquire finds a key
// busy and closed by Close, when the client is closed, or after
// idleClose without waiters. Only after the subscription is confirmed does a
// waiter join a queue, so a release cannot be announced to a Locker that is
// not listening yet. go-redis reconnects and resubscribes a dropped
// connection; when the subscription is confirmed again, every waiter retries
// once, since announcements may have been lost in between.
//
// An announcement is only a hint: the woken waiter still has to win the
// acquire script, so it cannot cause a double grant. When no announcement
// comes (a peer releases with a plain DEL, the key expires, a message is
// lost, the queue's head crashed), waiters fall back to polling at
// dlock.WithRetryDelay plus jitter.

// The channel and queue names, the queue's TTL and the subscription loop
// (reconnects, idle close) are shared with redlock in internal/wake.
const (
	queueTTL  = wake.QueueTTL  // ms; refreshed by every waiting attempt
	idleClose = wake.IdleClose // no waiters this long: drop the connection
	maxFree   = 64             // recycled interests kept
)

// queueKey returns the key of lockKey's waiter queue, in the same Cluster
// slot as lockKey (the same derivation as keys.Fence).
func queueKey(lockKey string) string { return wake.QueueKey(lockKey) }

// acquireWaiting is the acquire script of a Locker that has a waiter on the
// key: the same grant as scripts.Acquire, plus the waiter queue. It never
// reads the clock, so it runs on any Redis from 5.0 (ZPOPMIN) and replicates
// as it is.
//
// KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] waiter queue
// ARGV[1] token, ARGV[2] ttl ms, ARGV[3] Locker id, ARGV[4] the Locker's
// earlier place in the queue (0 = none), ARGV[5] "1" when more of the
// Locker's waiters wait after a win, ARGV[6] queue ttl ms.
// Returns {fence (> 0), 0 busy or -1 busy without expiry; the Locker's place
// in the queue now, 0 when not queued}.
var acquireWaiting = redis.NewScript(`
local function enqueue(place)
  if place == 0 then
    local last = redis.call('zrevrange', KEYS[3], 0, 0, 'withscores')
    place = 1
    if last[2] then place = tonumber(last[2]) + 1 end
  end
  redis.call('zadd', KEYS[3], 'nx', place, ARGV[3])
  redis.call('pexpire', KEYS[3], ARGV[6])
  return tonumber(redis.call('zscore', KEYS[3], ARGV[3]))
end
local v = redis.call('get', KEYS[1])
if not v then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
  local fence = redis.call('incr', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[3])
  if ARGV[5] == '1' then
    return {fence, enqueue(0)}
  end
  return {fence, 0}
end
if v == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {tonumber(redis.call('get', KEYS[2]) or '0'), tonumber(ARGV[4])}
end
local busy = 0
if redis.call('pttl', KEYS[1]) == -1 then busy = -1 end
return {busy, enqueue(tonumber(ARGV[4]))}
`)

// wakeAfterDelex is the announcement half of a native (DELEX) release, sent
// in the same pipeline: it wakes the queue's head if the lock key is gone.
// KEYS[1] lock key, KEYS[2] waiter queue. Returns 1 when it woke someone.
var wakeAfterDelex = redis.NewScript(`
if redis.call('exists', KEYS[1]) == 1 then return 0 end
local head = redis.call('zpopmin', KEYS[2])
if head[1] then
  redis.call('publish', 'dlock:wake:' .. head[1], KEYS[1])
  return 1
end
return 0
`)

var _ dlock.ReleaseNotifier = (*Locker)(nil)

// Close stops the Locker's shared subscription to release announcements: a
// goroutine and a pub/sub connection, opened the first time a waiting
// Acquire finds a key busy, and otherwise closed only when the client is
// closed or after 30s without waiters. Waits in progress and later ones
// fall back to polling; locks, TryAcquire and Release keep working. Close
// does not close the client. It is safe to call more than once and
// concurrently with other methods, and always returns nil.
func (l *Locker) Close() error {
	if l.notify != nil {
		l.notify.close()
	}
	return nil
}

// notifier is a Locker's shared subscription to release announcements and
// the registry of its waiting Acquires. It is safe for concurrent use.
type notifier struct {
	client redis.UniversalClient
	id     string // the Locker's member name in waiter queues
	idArg  any    // id, boxed once for the script
	wake   string // its channel: wake.ChannelPrefix + id

	mu         sync.Mutex
	sub        *wake.Sub   // nil while there is no connection
	subscribed atomic.Bool // the subscription is confirmed and unbroken; set under mu
	byKey      map[string]*interest
	free       []*interest // recycled, so an uncontended Acquire allocates less
	idleSince  time.Time
	closed     bool
	wg         sync.WaitGroup // give-up cleanups
}

// interest is this Locker's wait for one lock key.
type interest struct {
	waiters []*waiter // in arrival order
	place   int64     // the Locker's place in the key's queue; 0 = not queued
}

// waiter is one waiting Acquire.
type waiter struct {
	ch   chan struct{}
	n    *notifier
	full string
	in   *interest
	left bool // stop was called; guarded by n.mu
}

func (w *waiter) stop() { w.n.leave(w) }

// newNotifier returns nil for clients whose pub/sub cannot follow the
// release script's PUBLISH: a Ring subscribes on one shard, chosen by
// channel name, while the release runs on the key's shard. Waits on those
// clients poll.
func newNotifier(c redis.UniversalClient) *notifier {
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return nil
	}
	id := dlock.NewToken()
	return &notifier{client: c, id: id, idArg: id, wake: wake.ChannelPrefix + id, byKey: make(map[string]*interest)}
}

// NotifyRelease implements dlock.ReleaseNotifier: the channel receives a
// value when the lock on key may have been released, so a waiting Acquire
// retries at once instead of at its next poll. It sends nothing to the
// server; the Locker's shared subscription starts when a waiting attempt
// first finds a key busy. stop must be called exactly once. On clients
// without usable pub/sub (a Ring) and after Close the channel never fires
// and waits poll.
func (l *Locker) NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func()) {
	n := l.notify
	if n == nil || dlock.CheckKey(key) != nil {
		return nil, func() {}
	}
	w := &waiter{ch: make(chan struct{}, 1), n: n, full: l.prefix + key}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, func() {}
	}
	in := n.byKey[w.full]
	if in == nil {
		if k := len(n.free); k > 0 {
			in, n.free = n.free[k-1], n.free[:k-1]
		} else {
			in = &interest{}
		}
		n.byKey[w.full] = in
	}
	w.in = in
	in.waiters = append(in.waiters, w)
	n.mu.Unlock()
	return w.ch, w.stop
}

// leave ends w's interest in key. A wake-up w did not use passes to the next
// local waiter; when the last waiter gives up while the Locker is queued,
// the queue entry is removed so no later release is announced to nobody.
func (n *notifier) leave(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.left {
		return
	}
	w.left = true
	full, in := w.full, w.in
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
	if len(in.waiters) > 0 || n.byKey[full] != in {
		return
	}
	delete(n.byKey, full)
	if len(n.byKey) == 0 {
		n.idleSince = time.Now()
	}
	queued := in.place != 0
	if len(n.free) < maxFree {
		clear(in.waiters[:cap(in.waiters)])
		in.waiters, in.place = in.waiters[:0], 0
		n.free = append(n.free, in)
	}
	if queued && !n.closed {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = n.client.ZRem(ctx, queueKey(full), n.id).Err() // best effort
		}()
	}
}

// acquire makes one attempt to take g's key. With a local waiter on the key
// and a confirmed subscription it runs the queueing script; otherwise the
// plain one, and a busy reply with a waiter present opens the subscription.
func (l *Locker) acquire(ctx context.Context, g *grant, ttl time.Duration) (int64, error) {
	n := l.notify
	if n == nil {
		return scripts.Acquire.Run(ctx, l.client, g.acqKeys[:2], g.tokenArg, l.ttlArg(ttl)).Int64()
	}
	if !n.subscribed.Load() {
		// Nobody can be queued yet: the plain script, without taking
		// n.mu on the uncontended path.
		fence, err := scripts.Acquire.Run(ctx, l.client, g.acqKeys[:2], g.tokenArg, l.ttlArg(ttl)).Int64()
		if err == nil && fence <= 0 {
			n.listen(g.key)
		}
		return fence, err
	}
	full := g.key
	n.mu.Lock()
	in := n.byKey[full]
	if in == nil || len(in.waiters) == 0 || n.closed {
		n.mu.Unlock()
		return scripts.Acquire.Run(ctx, l.client, g.acqKeys[:2], g.tokenArg, l.ttlArg(ttl)).Int64()
	}
	place, keep := in.place, "0"
	if len(in.waiters) > 1 {
		keep = "1"
	}
	n.mu.Unlock()

	res, err := acquireWaiting.Run(ctx, l.client, g.acqKeys[:], g.tokenArg, l.ttlArg(ttl), n.idArg, place, keep, queueTTL).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, redis.Nil // a malformed reply: reported as a failed attempt
	}
	n.mu.Lock()
	if n.byKey[full] == in { // not recycled meanwhile
		in.place = res[1]
	}
	n.mu.Unlock()
	return res[0], nil
}

// listen opens the shared subscription, unless it is open or opening, when
// a local Acquire waits for full. The subscription's goroutine subscribes,
// so no call here waits on the network.
func (n *notifier) listen(full string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if in := n.byKey[full]; n.sub != nil || n.closed || in == nil || len(in.waiters) == 0 {
		return
	}
	n.sub = wake.Start(n.client, n.wake, subHandler{n})
}

// subHandler turns the subscription's events into wake-ups (wake.Handler).
type subHandler struct{ n *notifier }

// Subscribed records the subscription's state. Confirmation (the first, or
// after a reconnect) wakes every waiter once: they were not queued yet, or
// announcements may have been lost while the connection was down.
func (h subHandler) Subscribed(s *wake.Sub, ok bool) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sub != s {
		return
	}
	n.subscribed.Store(ok && !n.closed)
	if n.subscribed.Load() {
		for _, in := range n.byKey {
			for _, w := range in.waiters {
				signal(w)
			}
		}
	}
}

// Message wakes the earliest local waiter for the lock key full: the
// Locker was the head of its queue.
func (h subHandler) Message(_ *wake.Sub, full string) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if in := n.byKey[full]; in != nil && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
}

// Idle reports whether the Locker has had no waiters for idleClose; if so
// the subscription is forgotten (it closes itself) and the next busy
// waiting attempt opens a new one.
func (h subHandler) Idle(s *wake.Sub) bool {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sub != s || len(n.byKey) > 0 || time.Since(n.idleSince) < idleClose {
		return n.sub != s
	}
	n.sub = nil
	n.subscribed.Store(false)
	return true
}

// Gone forgets the subscription after the client was closed.
func (h subHandler) Gone(s *wake.Sub) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sub == s {
		n.sub = nil
		n.subscribed.Store(false)
	}
}

// close stops the subscription and waits for the notifier's goroutines.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.subscribed.Store(false)
	sub := n.sub
	n.sub = nil
	n.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
	n.wg.Wait()
}

// signal wakes w unless a wake-up is already pending.
func signal(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// ttlArg returns ttl in milliseconds as a script argument, boxed once for
// the TTL a Locker is used with most: one allocation less per attempt.
func (l *Locker) ttlArg(ttl time.Duration) any {
	ms := dlock.Milliseconds(ttl)
	if b := l.lastTTL.Load(); b != nil && b.ms == ms {
		return b.arg
	}
	b := &boxedTTL{ms: ms, arg: ms}
	l.lastTTL.Store(b)
	return b.arg
}

type boxedTTL struct {
	ms  int64
	arg any
}

// releaseNative deletes g's key with DELEX IFEQ and, in the same pipeline
// (one round trip), wakes the head of its waiter queue.
func (l *Locker) releaseNative(ctx context.Context, g *grant) (int64, error) {
	pipe := l.client.Pipeline()
	del := pipe.DelExArgs(ctx, g.key, redis.DelExArgs{Mode: "IFEQ", MatchValue: g.token})
	qk := g.relKeys[:]
	wake := wakeAfterDelex.EvalSha(ctx, pipe, qk)
	_, _ = pipe.Exec(ctx)
	n, err := del.Result()
	if err != nil {
		return 0, err
	}
	if werr := wake.Err(); werr != nil && n == 1 && redis.HasErrorPrefix(werr, "NOSCRIPT") {
		// The server lost its script cache: announce with a second round
		// trip (EVALSHA, then EVAL). Other errors only cost the waiters a
		// poll.
		_ = wakeAfterDelex.Run(ctx, l.client, qk).Err()
	}
	return n, nil
}
