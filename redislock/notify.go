package redislock

import (
	"context"
	"strconv"
	"strings"
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
// lock and hands it on to the queue's head by publishing the lock key on
// the head's own channel, "dlock:wake:<id>", in the same round trip; that
// Locker wakes its earliest local waiter, which retries at once. So a
// release wakes at most one Locker, the one that has waited longest.
//
// When to wake the head (the hand-off policy; the scripts are
// internal/scripts/acquire_waiting.lua, release.lua and queue.lua), in the
// spirit of sync.Mutex's normal and starvation modes. Waking costs the
// woken waiter a round trip, wasted if the releaser takes the lock again
// first, which a holder looping over a lock does at once; and handing the
// lock to a parked waiter costs both machines more than the holder's own
// re-take. So a holder may re-take ("barge") while the queue's head is
// young, for at most handoffAfter (T) of server time after the head came to
// the front:
//
//   - A waiting attempt that takes the free lock over another Locker at the
//     head, while that head has headed the queue for less than T, is told
//     how much of the head's T is left ("quiet"); it also tells the head,
//     once, in a deferred announcement ("key\x00µs"), to retry by itself
//     when its T is up plus T of slack. A release within the quiet time
//     skips the queue (a plain compare-and-delete), and the releaser's
//     next attempt within it is the plain attempt (quietHint): 2 round
//     trips and the same commands per acquisition as a lock without a
//     queue.
//   - Any other release hands the lock on: it pops the head and either
//     grants the lock to it directly (below) or reserves the lock for that
//     Locker for reserveFor (R), and publishes to it. The reservation is a
//     value in the lock key itself, "dlock:reserved:<Locker id>" with a TTL
//     of R, so every other attempt is refused (a node-redlock or redsync
//     client's SET NX too) until that Locker replaces it with its token,
//     gives up (its Locker passes the reservation on to the next head at
//     once) or R passes. The one exception: if the lock is being re-taken
//     at once and the new head is young, the release defers it as above
//     instead of waking it. A newcomer's refused waiting attempt marks the
//     lock so when a reservation refused it (the releaser came back before
//     the woken waiter), or when its Locker came back at once after
//     releasing a short hold on the key (the woken waiter was quicker:
//     shortRelease).
//
// Direct grants. A reservation costs the hand-off a round trip: the woken
// waiter's attempt, after the announcement. So a refused waiting attempt
// also registers its token and TTL in the queue's state, and a release of a
// lock held at least directAfter (1ms) that wakes that Locker sets the key
// to the registered token itself, draws its fence, and publishes key, token,
// fence and TTL. The Locker's earliest waiter returns the lock without
// asking the server: two round trips per hand-off instead of three. Shorter
// holds (a loop re-taking the lock) keep the reservation: a granted waiter
// needs no round trip, so its own hold-0 release reaches the server before
// the releaser's next attempt can mark the lock as being re-taken at once,
// and the loop becomes a chain of hand-offs (measured in bench C1: 1157 of
// 1810 runs of one Locker's acquisitions were a single one).
//
//   - Only a Locker that listens gets a grant: PUBLISH answers how many
//     connections received the message, and if none did (the Locker's
//     subscription is gone) the release deletes the key again and tries the
//     next head. On a Cluster PUBLISH counts only its node's subscribers, so
//     Lockers there do not register and are always reserved for.
//   - The token is the interest's (interest.token), not one attempt's:
//     every registering attempt of the Locker for the key carries it, one
//     at a time, until something takes a grant to it. So a grant whose
//     announcement is lost (a cut connection) is still found: the Locker's
//     next attempt, at its poll or when its subscription is confirmed again,
//     finds the key holding its own token and takes it (acquire_waiting.lua,
//     "ours already"), as after a lost reply. Only one thing takes a grant:
//     the announcement, or the attempt that finds it (settle, take); the
//     token is retired then, and an announcement for a retired token is
//     ignored. An attempt whose reply is lost keeps the token too (it may
//     have registered it), and TryAcquire leaves a key holding it alone:
//     the next attempt takes it, or leave gives it back.
//   - A grant nobody takes is given back: a Locker whose last waiter left,
//     or that is closed, runs the leave script with the tokens it will not
//     use, which passes a key holding one of them on to the next head.
//   - The grant's TTL starts at the release, after the token was minted
//     (tokenSince), so the taker's validity counts from tokenSince; if that
//     leaves less than half the TTL (a long wait), or the waiter asked for
//     another TTL, the taker renews the key with one round trip first.
//   - A woken Locker that hangs before it takes its grant holds the key for
//     its TTL, as a holder that hangs does; a reservation would have held it
//     for R.
//
// The queue's state (the head and since when, whether it was told, the
// refused-newcomer mark, the waiters' R and T) is a hash beside the queue,
// "dlock:turn:{key}" (statePrefix), expiring with it.
//
// Fairness bound: while anyone waits, a holder re-takes the lock for at most
// about T (plus one hold) before the head is woken or retries by itself,
// and then the head has the lock's first claim. With k Lockers queued
// ahead, a waiter gets the lock within about k times (T + a hold + a
// hand-off): with 15 parked waiters and the default T of 20ms, about
// 220-240ms on a local server (bench C1), against 1-2s of starvation for
// retry-and-back-off clients. Holders that do not re-take at once (every
// hand-off to a parked waiter) wake the head in the release itself, as
// before, so a plain queue of waiters is served in arrival order at one
// round trip per hand-off.
// TryAcquire, and the first attempts of a Locker not yet subscribed, make
// the plain attempt (acquirePlain): a reservation refuses it like any
// held lock, but it does not mark newcomers refused, and its grant is
// never quiet. A woken waiter that loses anyway (its reservation ran out, or
// a client that ignores reservations took the lock) goes back to its old
// place at the front, counting as old enough to be woken by the next
// release. A woken Locker that crashed holds the others off for at most R
// (500ms); the queue's new head retries as the reservation lapses (its
// refused attempt read when), the others at their next poll. (A crashed
// Locker's subscription is gone, so it gets no direct grant.)
//
// Why it stays safe: a lock is held by the token in the lock key, and the
// key is set to a token only where it is known to be free: by SET NX, as
// without a queue; by the waiting attempt of the Locker a reservation
// names, which replaces that reservation in the script that checked it; and
// by a release that grants directly, in the script that has just deleted
// the holder's key. The queue and the state hash only say who is next, and
// a reservation only refuses, for at most R. Within a Locker a grant to its
// token is taken once (above), and a taker's validity ends before the key
// expires. A quiet release is the plain compare-and-delete. Fences come
// from the same INCR, drawn while the key holds the new token. A held lock
// key's value is still the token alone, so node-redlock and redsync
// clients on the same keys are still excluded, and they wait out
// reservations too.
// Scripts that read the server clock (TIME) replicate their effects, so a
// replica applies the same writes.
//
// Every Locker has one pub/sub connection for all its keys (one SUBSCRIBE
// to its own channel), opened the first time a waiting Acquire finds a key
// busy and closed by Close, when the client is closed, or after
// idleClose without waiters. Only after the subscription is confirmed does a
// waiter join a queue, so a release cannot be announced to a Locker that is
// not listening yet. go-redis reconnects and resubscribes a dropped
// connection; when the subscription is confirmed again, every waiter retries
// once, since announcements may have been lost in between. A Locker woken
// for a key it no longer waits for (its waiter gave up meanwhile) passes the
// reservation on.
//
// A wake-up is only a hint: the woken waiter still has to win the acquire
// script. A direct grant's announcement is more than a hint, but it only
// reports what the release script did to the key, which only the token's
// holder or the TTL undoes; without it the Locker's next attempt finds the
// grant. A key that expires is announced by nobody (its holder crashed, or
// overran its TTL), so a refused waiting attempt of the queue's head also
// reads when the key expires, and the head retries then by itself (2ms
// after it; only the head, so the others do not race it). When no
// announcement comes otherwise (a peer releases with a plain DEL, a message
// is lost, the queue's head crashed), waiters fall back to polling at
// dlock.WithRetryDelay plus jitter.

// The channel and queue names, the queue's TTL and the subscription loop
// (reconnects, idle close) are shared with redlock in internal/wake.
const (
	queueTTL  = wake.QueueTTL  // ms; refreshed by every waiting attempt
	idleClose = wake.IdleClose // no waiters this long: drop the connection
	maxFree   = 64             // recycled interests kept

	// statePrefix + {lock key} is the queue's state (queue.lua).
	statePrefix = "dlock:turn:"
	// handoffAfter (T) is how long the queue's head lets a holder re-take
	// the lock before it is woken: one or two hundred hold-0 cycles on a
	// local server, so that hand-offs are under 3% of them. A hand-off
	// costs the loop two or three cycles: at 3ms, 5% of acquisitions were
	// hand-offs, and the loop ran 10-20% slower (bench C1, IC1). T is
	// short against anyone's patience, and well below the waiters'
	// default poll interval (50ms plus jitter).
	handoffAfter = 20 * time.Millisecond
	// reserveFor (R) is how long a woken waiter's Locker has the free lock's
	// first claim: far above a round trip, and the most a crashed waiter
	// delays the others before their polls take over.
	reserveFor = 500 * time.Millisecond
	// backAtOnce is how soon after its release of a short hold a Locker's
	// next attempt on the key counts as coming back at once
	// (shortRelease): far below a hand-off, which takes a round trip and
	// an announcement.
	backAtOnce = 25 * time.Microsecond
	// reservedReply is the acquire scripts' answer for a free lock that
	// is reserved for another Locker's woken waiter.
	reservedReply = -2
)

// setPolicy sets the hand-off threshold and the reservation (tests shorten
// them), boxed once as script arguments in µs. A Locker's waiting attempts
// record them in the queue's state, where releases and the Lockers leaving
// the queue read them (queue.lua).
func (l *Locker) setPolicy(handoff, reserve time.Duration) {
	l.handoffArg = handoff.Microseconds()
	l.reserveArg = reserve.Microseconds()
	if l.notify != nil {
		l.notify.handoff = handoff
	}
}

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
	client   redis.UniversalClient
	id       string // the Locker's member name in waiter queues
	idArg    any    // id, boxed once for the script
	wake     string // its channel: wake.ChannelPrefix + id
	handoff  time.Duration
	register bool // refused waiting attempts register for direct grants (not on a Cluster)

	mu         sync.Mutex
	sub        *wake.Sub   // nil while there is no connection
	subscribed atomic.Bool // the subscription is confirmed and unbroken; set under mu
	byKey      map[string]*interest
	leaving    map[string]int // keys with a queue clean-up in flight
	free       []*interest    // recycled, so an uncontended Acquire allocates less
	idleSince  time.Time
	closed     bool
	wg         sync.WaitGroup // give-up cleanups
}

// interest is this Locker's wait for one lock key. Its fields are guarded
// by n.mu.
type interest struct {
	waiters []*waiter  // in arrival order
	place   int64      // the Locker's place in the key's queue; 0 = not queued
	retry   wake.Retry // a deferred turn, or the lock's expiry

	// Direct grants (see above): token is the lock token this Locker's
	// registering attempts carry, minted at tokenSince, before any of
	// them; "" until the next one needs it. It is retired once something
	// took a grant to it.
	token      string
	tokenSince time.Time
	busy       bool         // an attempt carrying token is in flight
	stash      *directGrant // a grant to token announced while busy
	granted    *directGrant // a grant taken, for the next attempt on the key
	dead       bool         // the last waiter left while busy: settle cleans up
}

// directGrant is a lock a release granted to this Locker: the key was set
// to token with a TTL of ttlMS, after since.
type directGrant struct {
	token        string
	fence, ttlMS int64
	since        time.Time
}

// arm makes the earliest local waiter retry after d, unless a retry is
// already due sooner: the Locker heads the queue and was told to try by
// itself, or the lock it waits behind expires then. Called with n.mu held.
func (in *interest) arm(n *notifier, d time.Duration) {
	in.retry.At(time.Now().Add(d), func() { n.retryNow(in) })
}

// retryNow fires a pending retry.
func (n *notifier) retryNow(in *interest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if in.retry.Take() && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
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
	_, cluster := c.(*redis.ClusterClient)
	return &notifier{
		client: c, id: id, idArg: id, wake: wake.ChannelPrefix + id,
		// On a Cluster, PUBLISH counts the subscribers of the node it ran
		// on, while the message reaches every node's: it cannot tell a
		// release whether the head's Locker still listens.
		register: !cluster,
		byKey:    make(map[string]*interest), leaving: make(map[string]int),
	}
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
	n.quit(full, in)
	if in.busy {
		// The attempt in flight may still take a grant to in.token, or
		// register it again: it leaves the queue itself (settle).
		in.dead = true
	} else if len(n.free) < maxFree {
		clear(in.waiters[:cap(in.waiters)])
		*in = interest{waiters: in.waiters[:0], retry: in.retry}
		n.free = append(n.free, in)
	}
}

// quit cancels in's pending retry, takes the Locker out of full's queue if
// in is queued there, and gives back the grants nobody here will take now:
// one taken but not yet used, and one to in's token unless an attempt
// carrying it is in flight (that attempt gives it back itself, settle). The
// leave script frees the key if a release granted it to one of them.
// Called with n.mu held.
func (n *notifier) quit(full string, in *interest) {
	in.retry.Cancel()
	var unused []string
	if in.granted != nil {
		unused = append(unused, in.granted.token)
	}
	if !in.busy && in.token != "" {
		unused = append(unused, in.token)
		in.token = ""
	}
	if in.place != 0 || len(unused) > 0 {
		n.leaveQueue(full, unused...)
	}
	in.granted, in.place = nil, 0
}

// leaveQueue removes the Locker from full's queue in the background, and
// passes on a reservation it holds there (it was woken but will not take
// the lock), or a grant to one of tokens. Called with n.mu held. The queue
// holds one entry per Locker, so until the removal is done a new waiter for
// full does not join the queue (it would be the entry removed): its
// attempts are plain ones, and it retries once the removal is done.
func (n *notifier) leaveQueue(full string, tokens ...string) {
	if n.closed {
		return
	}
	n.leaving[full]++
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.runLeave(ctx, full, tokens...)
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.leaving[full]--; n.leaving[full] == 0 {
			delete(n.leaving, full)
			if in := n.byKey[full]; in != nil && len(in.waiters) > 0 {
				signal(in.waiters[0])
			}
		}
	}()
}

// acquire makes one attempt to take g's key. With a local waiter on the key
// and a confirmed subscription it runs the queueing script; otherwise the
// plain one, and a busy reply with a waiter present opens the subscription.
func (l *Locker) acquire(ctx context.Context, g *grant, ttl time.Duration, start time.Time) (int64, error) {
	n := l.notify
	if n == nil {
		return l.acquirePlain(ctx, g, ttl)
	}
	if !n.subscribed.Load() {
		// Nobody can be queued yet: the plain attempt, without taking
		// n.mu on the uncontended path.
		fence, err := l.acquirePlain(ctx, g, ttl)
		if err == nil && fence <= 0 {
			n.listen(g.key)
		}
		return fence, err
	}
	full := g.key
	if h := l.retake.Load(); h != nil && h.key == full && time.Now().Before(h.until) {
		// This Locker released the key quietly and comes back within the
		// same quiet time: re-take it with the plain attempt, skipping the
		// queue (quietHint says why that is fair enough).
		fence, refused, err := l.setAndDraw(ctx, g, ttl)
		if !refused {
			g.quietUntil = h.until
			return fence, err
		}
		// Refused: wait as usual, which queues this Locker (the waiting
		// attempt says why, so the plain one need not).
	}
	n.mu.Lock()
	in := n.byKey[full]
	if in == nil || len(in.waiters) == 0 || n.closed || n.leaving[full] > 0 {
		n.mu.Unlock()
		return l.acquirePlain(ctx, g, ttl)
	}
	if gr := in.granted; gr != nil {
		in.granted = nil
		n.mu.Unlock()
		return l.takeGrant(ctx, g, gr, ttl)
	}
	// One attempt at a time carries the interest's token and registers
	// it; one that overlaps it (two local waiters) neither.
	register := "0"
	carry := n.register && !in.busy
	if carry {
		if in.token == "" {
			in.token, in.tokenSince = dlock.NewToken(), time.Now()
		}
		in.busy, register = true, "1"
		g.setToken(in.token)
		// Whatever became of this attempt, a grant to the token stays the
		// interest's: a later attempt finds it, or leave gives it back.
		// Were TryAcquire to delete a key holding it after a lost reply,
		// a release could still grant the token this attempt registered,
		// to nobody.
		g.carried = true
	}
	place, keep := in.place, "0"
	if len(in.waiters) > 1 {
		keep = "1"
	}
	n.mu.Unlock()
	back := "0"
	if r := l.lastShort.Load(); r != nil && r.key == full && time.Since(r.at) < l.backAtOnce {
		back = "1"
	}

	argv := g.argv(scripts.AcquireWaiting, g.keys.boxed[:4], g.tokenArg, l.ttlArg(ttl), n.idArg, place, keep, queueTTL, l.handoffArg, l.reserveArg, register, back)
	res, err := scripts.RunArgv(ctx, l.client, scripts.AcquireWaiting, argv).Int64Slice()
	if err == nil && len(res) != 4 {
		err = redis.Nil // a malformed reply: reported as a failed attempt
	}
	if carry && n.settle(full, in, g.token, err == nil && res[0] > 0) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		n.runLeave(lctx, full, g.token)
		cancel()
	}
	if err != nil {
		return 0, err
	}
	if res[0] > 0 && res[2] > 0 {
		g.quietUntil = start.Add(time.Duration(res[2]) * time.Microsecond)
	}
	n.mu.Lock()
	// Unless recycled meanwhile, or granted the lock (take: the release
	// popped the Locker, whatever place this attempt had).
	if n.byKey[full] == in && in.granted == nil {
		in.place = res[1]
		if res[3] >= 0 && len(in.waiters) > 0 {
			// The Locker heads the queue behind a held or reserved lock
			// (the script answers an expiry only then): if nobody releases
			// it (its holder, or the woken waiter it is reserved for,
			// crashed), retry as it expires.
			in.arm(n, wake.AfterExpiry(res[3]))
		}
	}
	n.mu.Unlock()
	return res[0], nil
}

// settle ends an attempt that carried in's token: won, or refused, or its
// outcome unknown (then treated as refused). Called without n.mu. After
// Close it reports whether the caller must run the leave script for the
// token itself.
func (n *notifier) settle(full string, in *interest, token string, won bool) (giveBack bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	stash := in.stash
	in.busy, in.stash = false, nil
	switch {
	case won:
		in.token = "" // taken by this attempt; a grant announced meanwhile was to it
	case in.dead || n.closed:
		// The last waiter left, or the Locker was closed, while the
		// attempt was in flight, and it may have queued and registered
		// the Locker again, or a release granted its token meanwhile.
		in.token = ""
		if n.closed {
			return true // no goroutines after Close: the caller leaves
		}
		n.leaveQueue(full, token)
	case stash != nil:
		n.take(full, in, stash)
	}
	return false
}

// take hands a grant to in's token, announced by a release, to the
// earliest local waiter: its next attempt returns the lock without asking
// the server (takeGrant). Called with n.mu held.
func (n *notifier) take(full string, in *interest, gr *directGrant) {
	in.token, in.place = "", 0 // the release popped the Locker from the queue
	if len(in.waiters) == 0 {
		n.leaveQueue(full, gr.token)
		return
	}
	gr.since = in.tokenSince
	in.granted = gr
	in.retry.Cancel()
	signal(in.waiters[0])
}

// takeGrant returns the lock a release granted this Locker directly, for g.
// Its TTL started after gr.since, before the first attempt that registered
// gr's token, so g's validity is counted from there. If that leaves less
// than half the TTL, or the grant's TTL is not ttl, one round trip renews
// it: the acquire script finds the key holding g's token.
func (l *Locker) takeGrant(ctx context.Context, g *grant, gr *directGrant, ttl time.Duration) (int64, error) {
	g.setToken(gr.token)
	if gr.ttlMS == dlock.Milliseconds(ttl) && time.Since(gr.since) < ttl/2 {
		g.anchor = gr.since
		return gr.fence, nil
	}
	argv := g.argv(scripts.Acquire, g.keys.boxed[:2], g.tokenArg, l.ttlArg(ttl))
	return scripts.RunArgv(ctx, l.client, scripts.Acquire, argv).Int64()
}

// acquirePlain makes one attempt without the queue: one of a Locker with
// no local waiter on the key. It sends SET NX PX and the fence counter's
// INCR in one pipeline, plain commands that cost the server less than a
// script. Only a refused SET (the key is held, or holds a reservation for a
// woken waiter) costs a second round trip: the acquire script, which tells
// why and takes the lock if it was freed meanwhile.
//
// The INCR of a refused SET draws a fence nobody uses, which leaves a gap.
// A granted SET's INCR runs while the lock is held (right after the SET,
// unless the lock expired in between, and then the attempt took more than
// its TTL and TryAcquire refuses it), and the next holder's SET comes
// after the release, so fences still increase from holder to holder.
func (l *Locker) acquirePlain(ctx context.Context, g *grant, ttl time.Duration) (int64, error) {
	fence, refused, err := l.setAndDraw(ctx, g, ttl)
	if !refused {
		return fence, err
	}
	argv := g.argv(scripts.Acquire, g.keys.boxed[:2], g.tokenArg, l.ttlArg(ttl))
	return scripts.RunArgv(ctx, l.client, scripts.Acquire, argv).Int64()
}

// setAndDraw sends SET NX PX and INCR in one pipeline and returns the
// fence, or refused when the SET was.
func (l *Locker) setAndDraw(ctx context.Context, g *grant, ttl time.Duration) (fence int64, refused bool, err error) {
	ks := &g.keys.boxed
	a := append(g.args[:0], "set", ks[0], g.tokenArg, "px", l.ttlArg(ttl), "nx", "incr", ks[1])
	pipe, _ := l.pipes.Get().(redis.Pipeliner)
	if pipe == nil {
		pipe = l.client.Pipeline()
	}
	set := pipe.Do(ctx, a[:6]...)
	incr := pipe.Do(ctx, a[6:]...)
	_, _ = pipe.Exec(ctx) // empties pipe for its next use
	l.pipes.Put(pipe)
	switch err := set.Err(); {
	case err == redis.Nil:
		return 0, true, nil
	case err != nil:
		return 0, false, err
	}
	if fence, err = incr.Int64(); err != nil {
		if isServerReply(err) {
			// The lock is ours but has no fence (a fence key of the
			// wrong type?): give it back rather than hold it for a
			// whole TTL. (TryAcquire cleans up after a lost reply.)
			l.cleanup(ctx, g, ttl)
		}
		return 0, false, err
	}
	return fence, false, nil
}

// quietHint records a quiet release: until the head it let wait is due,
// the releaser's next attempt on the key re-takes it with the plain
// attempt (no script, no queue state) and its grant is quiet until the same
// time. Within that time no release wakes anyone unless the head itself
// took the lock meanwhile; a reservation then refuses the re-take like any
// holder, and the releaser waits as usual. The head's wait grows by at
// most T.
type quietHint struct {
	key   string
	until time.Time
}

// shortRelease records when a Locker with waiters last released a lock it
// had held under directAfter: an attempt on the same key within backAtOnce
// of that comes back at once, as a loop over the lock does, and if it is
// refused it marks the lock as being re-taken at once, like a refusal by a
// reservation (acquire_waiting.lua). It is what tells a loop that lost
// the race to the waiter its release woke from a holder that steps aside:
// the woken waiter's attempt leaves a moment after the release's reply, so
// the releaser's next attempt reaches the server first only about half the
// time, and each loss would be one more hand-off (measured with 16 Lockers
// re-taking one key at hold 0: 15-24% of acquisitions were hand-offs,
// most of them single re-takes, and backAtOnce covers 98% of the
// releasers' returns, against 6% of those of holders that wait for the
// next holder first).
type shortRelease struct {
	key string
	at  time.Time
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

// Message handles an announcement for a lock key. The payload is the key
// when the Locker was woken (the lock is free and reserved for it): its
// earliest local waiter retries at once. It is the key, a NUL and a number
// of µs when the Locker heads the queue but a holder may re-take the lock
// (deferred): the waiter retries by itself that long plus T later, unless
// a wake-up comes first. A Locker without a waiter for the key leaves the
// queue, passing the reservation on.
func (h subHandler) Message(_ *wake.Sub, payload string) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if in := n.byKey[payload]; in != nil && len(in.waiters) > 0 {
		in.retry.Cancel()
		signal(in.waiters[0])
		return
	}
	if full, gr, ok := parseGrant(payload); ok {
		in := n.byKey[full]
		switch {
		case in == nil || in.token != gr.token || n.closed:
			// A token retired already: an attempt took the grant (it found
			// the key holding its token), or the Locker gave it back.
		case in.busy:
			in.stash = gr // the attempt in flight may take it (settle)
		default:
			n.take(full, in, gr)
		}
		return
	}
	full, after, deferred := parseDeferred(payload)
	if !deferred {
		full = payload
	}
	in := n.byKey[full]
	switch {
	case in == nil || len(in.waiters) == 0:
		n.leaveQueue(full)
	case deferred:
		in.arm(n, after+n.handoff)
	}
}

// runLeave runs the leave script for full (best effort).
func (n *notifier) runLeave(ctx context.Context, full string, tokens ...string) {
	fence, queue, state := derivedKeys(full)
	args := []any{n.idArg}
	for _, t := range tokens {
		args = append(args, t)
	}
	_ = scripts.Leave.Run(ctx, n.client, []string{full, queue, state, fence}, args...).Err()
}

// parseGrant splits a direct grant's announcement, "key\x01token\x01fence\x01ttl"
// (the key may hold \x01 itself; the other fields do not).
func parseGrant(payload string) (full string, gr *directGrant, ok bool) {
	rest, ttl, ok1 := cutLast(payload)
	rest, fence, ok2 := cutLast(rest)
	full, token, ok3 := cutLast(rest)
	if !ok1 || !ok2 || !ok3 || token == "" {
		return "", nil, false
	}
	f, err1 := strconv.ParseInt(fence, 10, 64)
	t, err2 := strconv.ParseInt(ttl, 10, 64)
	if err1 != nil || err2 != nil || f <= 0 || t <= 0 {
		return "", nil, false
	}
	return full, &directGrant{token: token, fence: f, ttlMS: t}, true
}

// cutLast splits s around its last \x01.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, 1)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// parseDeferred splits a deferred announcement, "key\x00µs".
func parseDeferred(payload string) (full string, after time.Duration, ok bool) {
	i := strings.LastIndexByte(payload, 0)
	if i < 0 {
		return "", 0, false
	}
	us, err := strconv.ParseInt(payload[i+1:], 10, 64)
	if err != nil || us < 0 {
		return "", 0, false
	}
	return payload[:i], time.Duration(us) * time.Microsecond, true
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
	for full, in := range n.byKey {
		// Waits poll from now on, with fresh tokens.
		n.quit(full, in)
	}
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
// (one round trip), hands it on as the release script does, unless the
// release is quiet; directly when direct (grant.direct).
func (l *Locker) releaseNative(ctx context.Context, g *grant, quiet, direct bool) (int64, error) {
	if quiet {
		return l.client.DelExArgs(ctx, g.key, redis.DelExArgs{Mode: "IFEQ", MatchValue: g.token}).Result()
	}
	pipe := l.client.Pipeline()
	del := pipe.DelExArgs(ctx, g.key, redis.DelExArgs{Mode: "IFEQ", MatchValue: g.token})
	qk, args := g.releaseKeys(), []any(nil) // lock, queue, state, fence
	if direct {
		args = []any{"1"}
	} else {
		qk = qk[:3]
	}
	wake := scripts.Wake.EvalSha(ctx, pipe, qk, args...)
	_, _ = pipe.Exec(ctx)
	n, err := del.Result()
	if err != nil {
		return 0, err
	}
	if werr := wake.Err(); werr != nil && n == 1 && redis.HasErrorPrefix(werr, "NOSCRIPT") {
		// The server lost its script cache: hand on with a second round
		// trip (EVALSHA, then EVAL). Other errors only cost the waiters a
		// poll.
		_ = scripts.Wake.Run(ctx, l.client, qk, args...).Err()
	}
	return n, nil
}
