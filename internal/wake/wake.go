// Package wake implements wake-on-release for the Redis backends, one
// mechanism for redislock (one server) and redlock (one per node).
//
// A waiting Locker puts its id in a FIFO beside the lock key, a sorted set
// "dlock:waiters:{key}" scored by arrival, on each server where it holds a
// subscription to its own channel "dlock:wake:<id>"; the acquire script does
// it in the attempt's own round trip (scripts/acquire.lua). The release
// script deletes the key, pops the queue's head and publishes the key on the
// head's channel, in the release's round trip. The woken Locker's earliest
// local waiter for the key retries at once. A wake-up is only a hint: the
// retry still has to win the lock with a plain SET NX, and a release never
// hands the key to anyone, so between holders the key is free for every
// client on the wire (redsync, node-redlock, bsm/redislock).
//
// Nobody announces an expiry (a holder that crashed), so an attempt refused
// on a server where the Locker heads the queue also reads the key's expiry,
// and the Locker's earliest waiter retries then by itself (Retry). Waits
// also poll at the retry delay plus jitter, which covers peers that do not
// publish, lost messages, dead servers, and a queue head that is gone: the
// release that pops a dead head wakes nobody, and the others find the free
// key at their next poll. No state on the server holds a lock for anyone.
package wake

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/nodeerr"
)

const (
	// ChannelPrefix + Locker id is a Locker's wake-up channel. The release
	// scripts spell it out ('dlock:wake:').
	ChannelPrefix = "dlock:wake:"
	// QueueTTL (ms) is the queue's expiry, refreshed by every waiting
	// attempt, so a queue of crashed Lockers goes away.
	QueueTTL = 60_000
	// IdleClose is how long a Locker keeps its subscription without
	// waiters.
	IdleClose = 30 * time.Second

	// A subscription silent for pingAfter is pinged, and one whose pong
	// does not come within pongWithin is taken for dead (a NAT or firewall
	// that dropped the flow blackholes packets and sends no RST, and TCP
	// would retry for minutes): it is closed and made again on a new
	// connection. So a release announced into a dead connection is made up
	// for within about 2s of the last traffic, well below the polls that
	// would otherwise find it (a 5s retry delay waited all of it). The cost
	// is one PING a second per idle subscription, which exists only while
	// its Locker waits (and for IdleClose after): about a microsecond of
	// server time each. A pong later than a second (a server stalled that
	// long) costs a reconnect, which wakes the Locker's waiters once.
	pingAfter    = time.Second
	pongWithin   = time.Second
	maxReconnect = time.Second // cap of the reconnect backoff
)

// Handler receives a Sub's events. Its methods are called from the Sub's
// goroutine, one at a time, and must not call s.Close.
type Handler interface {
	// Subscribed reports that the subscription was confirmed (ok) or
	// broke (!ok). A confirmation after a break means announcements may
	// have been lost.
	Subscribed(s *Sub, ok bool)
	// Message delivers a payload published on the channel.
	Message(s *Sub, payload string)
	// Idle is asked after pingAfter of silence; true ends the Sub (the
	// handler has forgotten it).
	Idle(s *Sub) bool
	// Gone reports that the Sub ended by itself: the client was closed.
	Gone(s *Sub)
}

// Sub is a subscription to one channel on one client, run by one goroutine
// until Close, until the client is closed, or until its Handler reports it
// idle. go-redis redials a broken connection and resubscribes; a silent one
// (no pong) the Sub replaces itself.
type Sub struct {
	c          redis.UniversalClient
	mu         sync.Mutex
	ps         *redis.PubSub // replaced when its connection is found dead
	channel    string
	h          Handler
	subscribed atomic.Bool
	done       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

// Start opens the subscription. It does not wait on the network: the
// goroutine subscribes.
func Start(c redis.UniversalClient, channel string, h Handler) *Sub {
	s := &Sub{c: c, ps: c.Subscribe(context.Background()), channel: channel, h: h, done: make(chan struct{})}
	s.wg.Add(1)
	go s.run()
	return s
}

// Subscribed reports whether the subscription is confirmed and unbroken.
func (s *Sub) Subscribed() bool { return s.subscribed.Load() }

// Close ends the subscription and waits for its goroutine. It is safe to
// call more than once.
func (s *Sub) Close() {
	s.once.Do(func() {
		s.subscribed.Store(false)
		s.mu.Lock()
		close(s.done)
		_ = s.ps.Close()
		s.mu.Unlock()
	})
	s.wg.Wait()
}

// redial replaces the PubSub, whose connection is dead, with a new one
// subscribed to the channel, and returns it; nil after Close.
func (s *Sub) redial() *redis.PubSub {
	ps := s.c.Subscribe(context.Background())
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		_ = ps.Close()
		return nil
	default:
	}
	old := s.ps
	s.ps = ps
	s.mu.Unlock()
	_ = old.Close()
	// A failed SUBSCRIBE is repeated by go-redis's reconnect in Receive.
	_ = ps.Subscribe(context.Background(), s.channel)
	return ps
}

func (s *Sub) run() {
	defer s.wg.Done()
	ctx := context.Background()
	s.mu.Lock()
	ps := s.ps
	s.mu.Unlock()
	// A failed SUBSCRIBE is repeated by go-redis's reconnect in Receive.
	_ = ps.Subscribe(ctx, s.channel)
	st := &state{ps: ps}
	for {
		wait := pingAfter
		if st.pinged {
			wait = pongWithin
		}
		msg, err := st.ps.ReceiveTimeout(ctx, wait)
		if err != nil {
			if !s.failed(ctx, st, err) {
				return
			}
			continue
		}
		st.backoff, st.pinged = 0, false // anything received shows the connection lives
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == s.channel {
				s.subscribed.Store(true)
				s.h.Subscribed(s, true)
			}
		case *redis.Message:
			if m.Channel == s.channel {
				s.h.Message(s, m.Payload)
			}
		}
	}
}

// state is what run's loop knows of its connection.
type state struct {
	ps      *redis.PubSub
	pinged  bool // a ping awaits its pong
	backoff time.Duration
}

// failed handles an error of a receive: a ping when the connection was
// idle, a new connection when the pong did not come, a pause before
// receiving again otherwise. It reports false when run must end (Close,
// the client closed, nobody waits).
func (s *Sub) failed(ctx context.Context, st *state, err error) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	switch {
	case errors.Is(err, redis.ErrClosed):
		s.subscribed.Store(false)
		s.h.Gone(s)
		return false
	case nodeerr.IsTimeout(err) && st.pinged:
		// No pong: the connection is dead although nothing said so.
		st.pinged = false
		if s.subscribed.Swap(false) {
			s.h.Subscribed(s, false)
		}
		st.ps = s.redial()
		return st.ps != nil
	case nodeerr.IsTimeout(err):
		if s.h.Idle(s) {
			s.subscribed.Store(false)
			_ = st.ps.Close()
			return false
		}
		// A closed connection fails here and is redialled; a silent one
		// is found by the missing pong.
		st.pinged = st.ps.Ping(ctx) == nil
		return true
	}
	st.pinged = false
	if s.subscribed.Swap(false) {
		s.h.Subscribed(s, false)
	}
	st.backoff = min(max(2*st.backoff, 10*time.Millisecond), maxReconnect)
	t := time.NewTimer(st.backoff)
	select {
	case <-t.C:
	case <-s.done:
		t.Stop()
		return false
	}
	var re redis.Error
	if errors.As(err, &re) && err != redis.Nil {
		// The server refused the SUBSCRIBE (an ACL, say) on a healthy
		// connection, so no reconnect will repeat it.
		_ = st.ps.Subscribe(ctx, s.channel)
	}
	return true
}
