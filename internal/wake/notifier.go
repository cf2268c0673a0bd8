package wake

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
)

// Notifier is one Locker's side of wake-on-release: its id, subscriptions
// (one per server) and waiting Acquires. It is safe for concurrent use.
type Notifier struct {
	clients []redis.UniversalClient // per server
	id      string
	channel string
	ctx     context.Context // ended by Close
	cancel  context.CancelFunc

	mu     sync.Mutex
	subs   []*sub // per server; nil while not subscribed there
	byKey  map[string]*interest
	yields map[string]time.Time // keys whose queue head the Locker's release woke, until when it goes first
	idle   time.Time            // since when byKey is empty
	wg     sync.WaitGroup       // the subscriptions' goroutines and queue clean-ups
}

// interest is the Locker's wait for full, in byKey while it has waiters
// (until Close).
type interest struct {
	full    string
	waiters []*waiter   // in arrival order
	place   []int64     // per server: the Locker's place in the key's queue, 0 = not queued, placeUnknown
	retry   *time.Timer // the earliest waiter's retry when no announcement will come (retryAt)
	due     time.Time   // retry's time, zero when none is pending
}

// placeUnknown is the place of an attempt that queued and got no reply:
// the next attempt asks as if not queued (the script keeps a place it
// finds), and leaving removes it (a ZREM of nothing is harmless).
const placeUnknown = -1

type waiter struct {
	ch chan struct{}
	in *interest
}

// New returns the Notifier of a Locker over clients, one per server.
func New(clients []redis.UniversalClient) *Notifier {
	id := bridge.NewToken()
	ctx, cancel := context.WithCancel(context.Background())
	return &Notifier{clients: clients, id: id, channel: ChannelPrefix + id, ctx: ctx, cancel: cancel,
		subs: make([]*sub, len(clients)), byKey: map[string]*interest{}, yields: map[string]time.Time{}, idle: time.Now()}
}

// Register waits for the release of full (the prefixed key). It sends
// nothing; after Close the channel never fires.
func (n *Notifier) Register(full string) (released <-chan struct{}, stop func()) {
	w := &waiter{ch: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ctx.Err() != nil {
		return nil, func() {}
	}
	in := n.byKey[full]
	if in == nil {
		in = &interest{full: full, place: make([]int64, len(n.clients))}
		n.byKey[full] = in
	}
	w.in = in
	in.waiters = append(in.waiters, w)
	return w.ch, func() { n.leave(w) }
}

// leave ends w's wait; a second call changes nothing. An unused wake-up
// passes to the next local waiter; the last one out forgets the key.
func (n *Notifier) leave(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	in := w.in
	in.waiters = slices.DeleteFunc(in.waiters, func(x *waiter) bool { return x == w })
	select {
	case <-w.ch:
		if len(in.waiters) > 0 {
			signal(in.waiters[0])
		}
	default:
	}
	if len(in.waiters) > 0 || n.byKey[in.full] != in {
		return
	}
	delete(n.byKey, in.full)
	if len(n.byKey) == 0 {
		n.idle = time.Now()
	}
	n.forget(in)
}

// forget cancels in's retry and takes the Locker out of its key's queues
// (in the background, within a second), so that releases do not wake nobody.
func (n *Notifier) forget(in *interest) {
	if in.retry != nil {
		in.retry.Stop()
	}
	in.due = time.Time{}
	queue := keys.Queue(in.full)
	for i, p := range in.place {
		if p == 0 {
			continue
		}
		c := n.clients[i]
		n.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = c.ZRem(ctx, queue, n.id).Err()
		})
	}
}

// Close ends the subscriptions and takes the Locker out of its queues (best
// effort, within a second); waits go on by polling. It is idempotent.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.cancel()
	for _, in := range n.byKey {
		n.forget(in)
	}
	clear(n.byKey)
	var conns []*redis.PubSub // closed outside mu: a close can wait for a write in progress
	for _, s := range n.subs {
		if s != nil {
			conns = append(conns, s.ps)
		}
	}
	clear(n.subs)
	n.mu.Unlock()
	for _, ps := range conns {
		_ = ps.Close()
	}
	n.wg.Wait()
}

// yieldFor is how long the Locker's own attempts on a key let the queue
// head its release woke go first, else a loop over the lock beats the
// waiter it woke. It covers a waiter up to about 50ms away and delays only
// this Locker's attempts, which queue behind the head or retry at its end.
const yieldFor = 50 * time.Millisecond

// Woke records that the Locker's release of full woke its queue's head.
func (n *Notifier) Woke(full string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if len(n.yields) >= 64 {
		maps.DeleteFunc(n.yields, func(_ string, until time.Time) bool { return !now.Before(until) })
	}
	n.yields[full] = now.Add(yieldFor)
}

// Plan is where one waiting attempt on a key queues the Locker.
type Plan struct {
	n     *Notifier
	in    *interest
	queue string
	args  [][]any   // per server, the script's queue arguments; nil: not subscribed there, do not queue
	until time.Time // when a yield ends (Woke; zero: none)
}

// Plan returns the plan of an attempt on full, nil when no local Acquire
// waits for it (a TryAcquire, after Close, or n nil). yield refuses the
// attempt unasked: the Locker lets the head its release woke go first,
// which a server where it is not subscribed cannot do; it subscribes
// everywhere and retries when the yield ends.
func (n *Notifier) Plan(full string) (p *Plan, yield bool) {
	if n == nil {
		return nil, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	in := n.byKey[full]
	if in == nil {
		return nil, false
	}
	p = &Plan{n: n, in: in, queue: keys.Queue(full), args: make([][]any, len(n.clients))}
	keep, yielding := "0", "0" // keep "1": more local waiters, stay queued after a grant
	if len(in.waiters) > 1 {
		keep = "1"
	}
	if until, ok := n.yields[full]; ok && time.Now().Before(until) {
		p.until, yielding = until, "1"
	} else {
		delete(n.yields, full)
	}
	everywhere := true
	for i, s := range n.subs {
		if s == nil || !s.ok {
			everywhere = false
			continue
		}
		p.args[i] = []any{n.id, max(in.place[i], 0), keep, QueueTTL, yielding}
	}
	if p.until.IsZero() || everywhere {
		return p, false
	}
	for i := range n.subs {
		n.subscribe(i)
	}
	n.retryAt(in, p.until.Add(time.Millisecond))
	return nil, true
}

// Queue returns server i's queue key and the script's waiting arguments,
// or "" and nil where the Locker is not subscribed.
func (p *Plan) Queue(i int) (key string, args []any) {
	if p == nil || p.args[i] == nil {
		return "", nil
	}
	return p.queue, p.args[i]
}

// Observe records server i's answer: busy or not, the Locker's place, and
// the busy key's expiry in ms when the Locker heads the queue (else
// negative). A busy key opens the subscription there, and a known expiry
// arms the retry just past it (Redis's 1ms precision): the holder may
// have crashed.
func (p *Plan) Observe(i int, busy bool, place, expiry int64) {
	if p == nil {
		return
	}
	n := p.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byKey[p.in.full] != p.in {
		return
	}
	if p.args[i] != nil {
		p.in.place[i] = place
	}
	if !busy {
		return
	}
	n.subscribe(i)
	if expiry >= 0 {
		// Heading the queue while yielding (the woken head was the only
		// waiter), retry at the yield's end in case that head is gone.
		due := time.Now().Add(time.Duration(expiry+2) * time.Millisecond)
		if end := p.until.Add(time.Millisecond); end.After(due) {
			due = end
		}
		n.retryAt(p.in, due)
	}
}

// Lost records that server i gave no usable answer: the place is unknown.
func (p *Plan) Lost(i int) { p.Observe(i, false, placeUnknown, -1) }

// retryAt makes in's earliest waiter retry at due, unless one is due
// sooner. n.mu is held.
func (n *Notifier) retryAt(in *interest, due time.Time) {
	if !in.due.IsZero() && !due.Before(in.due) {
		return
	}
	in.due = due
	if in.retry == nil {
		in.retry = time.AfterFunc(time.Until(due), func() { n.expired(in) })
	} else {
		in.retry.Reset(time.Until(due))
	}
}

// expired fires in's pending retry, unless it was cancelled.
func (n *Notifier) expired(in *interest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !in.due.IsZero() && len(in.waiters) > 0 {
		signal(in.waiters[0])
	}
	in.due = time.Time{}
}

// signal wakes w unless a wake-up is already pending.
func signal(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}
