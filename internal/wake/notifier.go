package wake

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
)

// Notifier is one Locker's side of wake-on-release: its id, its
// subscriptions (one per server, opened when a waiting attempt first finds a
// key busy there) and the registry of its waiting Acquires. It is safe for
// concurrent use.
type Notifier struct {
	clients []redis.UniversalClient // per server; nil where pub/sub is not usable (a Ring)
	id      string
	channel string

	mu     sync.Mutex
	subs   []*Sub // per server; nil while not subscribed there
	byKey  map[string]*interest
	yields map[string]time.Time // keys whose queue head the Locker's release woke, until when it goes first
	idle   time.Time            // since when byKey is empty
	closed bool
	wg     sync.WaitGroup // queue clean-ups
}

// interest is the Locker's wait for one lock key.
type interest struct {
	waiters []*waiter // in arrival order
	place   []int64   // per server: the Locker's place in the key's queue, 0 = not queued, placeUnknown
	retry   Retry     // at the expiry of the lock it waits behind
}

// placeUnknown is the place on a server where an attempt that queued got
// no reply: the Locker may be in the queue, at a place it does not know.
// The next attempt asks as if not queued (the script keeps a place it
// finds), and leaving removes it (ZREM of an absent member does nothing).
const placeUnknown = -1

type waiter struct {
	ch   chan struct{}
	full string
	in   *interest
	left bool // guarded by the Notifier's mu
}

// New returns the Notifier of a Locker over clients, one per server.
func New(clients []redis.UniversalClient) *Notifier {
	id := bridge.NewToken()
	return &Notifier{
		clients: clients,
		id:      id,
		channel: ChannelPrefix + id,
		subs:    make([]*Sub, len(clients)),
		byKey:   map[string]*interest{},
		yields:  map[string]time.Time{},
		idle:    time.Now(),
	}
}

// Register registers a waiting Acquire's interest in the lock key full (with
// prefix): the channel receives a value when the key may have been released,
// and stop ends the interest (it must be called exactly once). It sends
// nothing. After Close the channel never fires.
func (n *Notifier) Register(full string) (released <-chan struct{}, stop func()) {
	w := &waiter{ch: make(chan struct{}, 1), full: full}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, func() {}
	}
	in := n.byKey[full]
	if in == nil {
		in = &interest{place: make([]int64, len(n.clients))}
		n.byKey[full] = in
	}
	w.in = in
	in.waiters = append(in.waiters, w)
	return w.ch, func() { n.leave(w) }
}

// leave ends w's wait. An unused wake-up passes to the next local waiter;
// when the last one leaves, the Locker's queue entries are removed (best
// effort) so that later releases do not wake nobody.
func (n *Notifier) leave(w *waiter) {
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
	if !n.closed {
		n.unqueue(w.full, in)
	}
}

// unqueue removes the Locker from full's queue on every server where it is
// or may be queued, in the background, within a second.
func (n *Notifier) unqueue(full string, in *interest) {
	queue := keys.Queue(full)
	for i, p := range in.place {
		if p == 0 {
			continue
		}
		c := n.clients[i]
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = c.ZRem(ctx, queue, n.id).Err()
		}()
	}
}

// Close ends the subscriptions and takes the Locker out of every queue it
// is in (best effort, within a second). Waits in progress go on by polling.
// It is safe to call more than once.
func (n *Notifier) Close() {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		for full, in := range n.byKey {
			in.retry.Cancel()
			n.unqueue(full, in)
		}
	}
	subs := append([]*Sub(nil), n.subs...)
	clear(n.subs)
	n.mu.Unlock()
	for _, s := range subs {
		if s != nil {
			s.Close()
		}
	}
	n.wg.Wait()
}

// yieldFor is how long, after the Locker's release of a key woke the head
// of its queue, the Locker's own waiting attempts on the key let that head
// go first. Without it a Locker that takes the lock again right after
// releasing it (a loop) wins the race against the waiter it just woke,
// which needs the wake-up and a request to reach the server: in
// TestFairnessLongestWaiterFirst (16 Lockers, holds of 1ms) the releaser
// took the lock again in 334 of 1419 acquisitions and 661 turns came more
// than a round late, and a sole waiter 20ms away lost every round
// (TestWokenSoleWaiterGoesFirst). The window covers a waiter up to about
// 50ms away. It only delays this Locker's own next attempts, which queue
// behind (where the Locker is subscribed) and are woken when the head
// releases; if the woken head is gone, the Locker retries when the window
// ends, so it costs at most 50ms, and only then.
const yieldFor = 50 * time.Millisecond

// Woke records that the Locker's release of full woke the head of its
// queue.
func (n *Notifier) Woke(full string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if len(n.yields) >= 64 {
		for k, until := range n.yields {
			if !now.Before(until) {
				delete(n.yields, k)
			}
		}
	}
	n.yields[full] = now.Add(yieldFor)
}

// Plan is what one waiting attempt on a key sends beyond the acquire script's
// own arguments: where to queue the Locker, and where it already is.
type Plan struct {
	n     *Notifier
	in    *interest
	full  string
	queue string
	place []int64   // per server, a snapshot; -1: not subscribed there, do not queue
	keep  string    // "1": more local waiters, stay queued after a grant
	yield string    // "1": let the queue's head go first (Woke)
	until time.Time // when the yield ends
}

// Plan returns the queueing plan of an attempt on full, or nil when no local
// Acquire waits for it (a TryAcquire, or after Close).
func (n *Notifier) Plan(full string) *Plan {
	n.mu.Lock()
	defer n.mu.Unlock()
	in := n.byKey[full]
	if in == nil || len(in.waiters) == 0 || n.closed {
		return nil
	}
	p := &Plan{n: n, in: in, full: full, queue: keys.Queue(full), place: make([]int64, len(in.place)), keep: "0", yield: "0"}
	if len(in.waiters) > 1 {
		p.keep = "1"
	}
	if until, ok := n.yields[full]; ok {
		if time.Now().Before(until) {
			p.yield, p.until = "1", until
		} else {
			delete(n.yields, full)
		}
	}
	for i := range p.place {
		p.place[i] = -1
		if s := n.subs[i]; s != nil && s.Subscribed() {
			p.place[i] = max(in.place[i], 0)
		}
	}
	return p
}

// Queue returns, for server i, the queue key and the acquire script's
// waiting arguments (Locker id, earlier place, keep, queue ttl, yield), or
// ok false when the attempt must not queue there (not subscribed yet).
func (p *Plan) Queue(i int) (key string, args []any, ok bool) {
	if p == nil || p.place[i] < 0 {
		return "", nil, false
	}
	return p.queue, []any{p.n.id, p.place[i], p.keep, QueueTTL, p.yield}, true
}

// Observe records server i's answer to the attempt: whether the key was
// busy there, the Locker's place in the queue (from the script; ignored
// when it did not queue there), and the busy key's expiry in ms when the
// Locker heads the queue (else negative). A busy key on a server where the
// Locker is not subscribed opens the subscription; a busy key whose expiry
// is known arms the retry at that moment, in case its holder crashed.
func (p *Plan) Observe(i int, busy bool, place, expiry int64) {
	if p == nil {
		return
	}
	n := p.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byKey[p.full] != p.in || n.closed {
		return
	}
	if p.place[i] >= 0 {
		p.in.place[i] = place
	}
	if busy && n.subs[i] == nil && n.clients[i] != nil {
		n.subs[i] = Start(n.clients[i], n.channel, handler{n, i})
	}
	if busy && expiry >= 0 {
		// A Locker that yields and heads the queue (the woken head was
		// the only waiter) retries when the yield ends, in case that head
		// is gone; behind others, it is woken in turn.
		in := p.in
		due := time.Now().Add(AfterExpiry(expiry))
		if end := p.until.Add(time.Millisecond); p.yield == "1" && end.After(due) {
			due = end
		}
		in.retry.At(due, func() { n.expired(in) })
	}
}

// YieldHere reports that the attempt must be refused without asking the
// servers: the Locker lets the head its release woke go first, and it is
// not subscribed on every server, so the script cannot yield there.
func (p *Plan) YieldHere() bool {
	if p == nil || p.yield != "1" {
		return false
	}
	for _, x := range p.place {
		if x < 0 {
			return true
		}
	}
	return false
}

// Yielded records an attempt refused by YieldHere: it subscribes where the
// Locker is not yet subscribed (so that its next attempts queue), and, as
// nobody will wake it, its waiter retries when the yield ends.
func (p *Plan) Yielded() {
	n := p.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byKey[p.full] != p.in || n.closed {
		return
	}
	for i, c := range n.clients {
		if n.subs[i] == nil && c != nil {
			n.subs[i] = Start(c, n.channel, handler{n, i})
		}
	}
	in := p.in
	in.retry.At(p.until.Add(time.Millisecond), func() { n.expired(in) })
}

// Lost records that server i gave no usable answer to the attempt (a lost
// reply, an error): where the attempt asked to queue the Locker, it may
// have, so its place there is unknown until another attempt answers.
func (p *Plan) Lost(i int) {
	if p == nil || p.place[i] < 0 {
		return
	}
	n := p.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byKey[p.full] == p.in && !n.closed {
		p.in.place[i] = placeUnknown
	}
}

// expired fires a pending expiry retry.
func (n *Notifier) expired(in *interest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if in.retry.Take() && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
}

// handler receives server i's subscription events.
type handler struct {
	n *Notifier
	i int
}

// Subscribed: a confirmation (the first, or after a reconnect) wakes every
// waiter once, to queue on this server or because announcements may have
// been lost while the connection was down.
func (h handler) Subscribed(s *Sub, ok bool) {
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

// Message: the Locker headed the queue of the key a release just freed. A
// yield on the key is over: that was the release of the head it let go
// first, or of someone after it.
func (h handler) Message(_ *Sub, full string) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.yields, full)
	if in := n.byKey[full]; in != nil && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
}

// Idle ends the subscription after IdleClose without waiters.
func (h handler) Idle(s *Sub) bool {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs[h.i] != s {
		return true
	}
	if len(n.byKey) > 0 || time.Since(n.idle) < IdleClose {
		return false
	}
	n.subs[h.i] = nil
	return true
}

// Gone forgets a subscription whose client was closed.
func (h handler) Gone(s *Sub) {
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
