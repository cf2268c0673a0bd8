// Package wake keeps a Locker's side of wake-on-release ("Waiting" in
// package redislock) for redislock and redlock: its subscriptions, its
// waiters, and the retries nobody announces (a busy key's expiry, the end
// of a yield). The scripts queue and wake.
package wake

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rclient"
)

const (
	ChannelPrefix = "dlock:wake:" // + Locker id (the release scripts spell it out)
	// QueueTTL (ms), refreshed by every waiting attempt: a queue of crashed
	// Lockers goes away.
	QueueTTL  = 60_000
	IdleClose = 30 * time.Second // how long a subscription outlives its last waiter

	// A subscription silent this long is pinged, and made again on a new
	// connection if the pong does not come within as long: a NAT that
	// dropped the flow sends no RST. The cost, a PING a second, lasts only
	// while the Locker waits (and IdleClose after).
	silence = time.Second
)

// sub is the Locker's subscription on server i, run by listen until ended.
type sub struct {
	i  int
	ps *redis.PubSub // guarded by the Notifier's mu
	ok bool          // guarded by the Notifier's mu: confirmed and unbroken
}

// subscribe opens the subscription on server i unless there is one,
// without waiting on the network. n.mu is held.
func (n *Notifier) subscribe(i int) {
	if n.subs[i] != nil {
		return
	}
	ps := n.clients[i].Subscribe(n.ctx)
	s := &sub{i: i, ps: ps}
	n.subs[i] = s
	n.wg.Go(func() { n.listen(s, ps) })
}

// listen receives s's messages on ps. go-redis redials a broken
// connection; listen replaces a silent one and backs off after an error.
func (n *Notifier) listen(s *sub, ps *redis.PubSub) {
	ctx := n.ctx
	// A failed SUBSCRIBE is repeated by go-redis's reconnect in Receive.
	_ = ps.Subscribe(ctx, n.channel)
	pinged, backoff := false, time.Duration(0) // pinged: a ping awaits its pong
	for {
		msg, err := ps.ReceiveTimeout(ctx, silence)
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == n.channel {
				n.confirmed(s, true)
			}
		case *redis.Message:
			if m.Channel == n.channel {
				n.released(m.Payload)
			}
		}
		timeout := nodeerr.IsTimeout(err)
		switch {
		case err == nil:
			pinged, backoff = false, 0 // anything received shows the connection lives
		case n.ended(s, errors.Is(err, redis.ErrClosed), timeout && !pinged):
			_ = ps.Close()
			return
		case timeout && pinged:
			// No pong: the connection is dead although nothing said so.
			n.confirmed(s, false)
			if ps, pinged = n.redial(s), false; ps == nil {
				return
			}
			_ = ps.Subscribe(ctx, n.channel)
		case timeout: // a closed connection fails here and is redialled
			pinged = ps.Ping(ctx) == nil
		default:
			pinged = false
			n.confirmed(s, false)
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			if !backend.Sleep(ctx, backoff) {
				return
			}
			if rclient.IsReply(err) {
				// The server refused the SUBSCRIBE (an ACL, say) on a
				// healthy connection, so no reconnect will repeat it.
				_ = ps.Subscribe(ctx, n.channel)
			}
		}
	}
}

// ended reports whether s is over, and forgets it: after Close, its
// client's close (gone), or, asked after a silence (idle), IdleClose
// without waiters.
func (n *Notifier) ended(s *sub, gone, idle bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs[s.i] != s {
		return true
	}
	if gone || idle && len(n.byKey) == 0 && time.Since(n.idle) >= IdleClose {
		n.subs[s.i] = nil
		return true
	}
	return false
}

// redial replaces s's dead connection and returns the new one; nil once s
// is over.
func (n *Notifier) redial(s *sub) *redis.PubSub {
	ps := n.clients[s.i].Subscribe(n.ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	_ = s.ps.Close()
	if n.subs[s.i] != s {
		_ = ps.Close()
		return nil
	}
	s.ps = ps
	return ps
}

// confirmed records that s was confirmed (ok) or broke. A confirmation
// wakes every waiter once: to queue there, or to retry after
// announcements lost while the connection was down.
func (n *Notifier) confirmed(s *sub, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s.ok = ok
	if !ok || n.subs[s.i] != s {
		return
	}
	for _, in := range n.byKey {
		for _, w := range in.waiters {
			signal(w)
		}
	}
}

// released handles an announcement that full, whose queue the Locker
// headed, is free. It ends a yield on full: that was the release of the
// head it let go first, or of someone after it.
func (n *Notifier) released(full string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.yields, full)
	if in := n.byKey[full]; in != nil {
		signal(in.waiters[0])
	}
}
