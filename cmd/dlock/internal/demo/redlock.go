package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/redlock"
)

const (
	redlockTTL = 5 * time.Second
	// The per-node timeout is above redlock's 50ms default: the demo may
	// run on a busy laptop or against servers across a network.
	redlockNodeTimeout = time.Second
)

var redlockScenario = scenario{
	title:   "Redlock on independent servers",
	short:   "Redlock",
	summary: "2 of 5 lost: still works; 3 of 5 lost: refused",
	proves: []string{
		"Redlock holds the lock only where a majority of independent servers granted it with validity",
		"left, so losing a minority changes nothing for the holder, and losing a majority stops",
		"everyone rather than letting two holders in. The per-node answers come with the error",
		"(errors.As to *redlock.QuorumError). It still cannot stop a paused holder: use the fence.",
	},
	run: runRedlock,
}

func runRedlock(ctx context.Context, e *env, s *section) error {
	n := len(e.nodes)
	clients := make([]redis.UniversalClient, n)
	for i, nd := range e.nodes {
		clients[i] = nd.client
	}
	l, err := redlock.New(clients, redlock.WithNodeTimeout(redlockNodeTimeout))
	if err != nil {
		return err
	}
	quorum := n/2 + 1 // a majority
	s.say("Redlock takes the lock on all %d servers at once and counts it held only when a majority", n)
	s.say("(%d) granted it within the TTL (%v here; each node gets %v to answer). The nodes:", quorum, redlockTTL, redlockNodeTimeout)
	for i, nd := range e.nodes {
		s.say("  node %d  %-21s %s", i+1, nd.addr, describe(nd))
	}

	key := e.key("redlock")
	t0 := time.Now()
	defer func() {
		e.tl.Bar(e.scene+"Redlock", t0, time.Now(), timeline.Note, "the Redlock scenario; bands: nodes lost")
	}()
	up := n
	label := func(op string) string { return fmt.Sprintf("%s with %d of %d nodes up", op, up, n) }

	lock, err := l.TryAcquire(ctx, key, redlockTTL)
	s.result(label("acquire"), withFence(lock, err), err == nil, "ok")
	if err != nil {
		showNodes(e, s, err)
		return nil
	}
	firstFence := lock.Fence()
	err = lock.Release(ctx)
	s.result(label("release"), outcome(err), err == nil, "ok")

	// Lose a minority: the most that still leaves a majority.
	victims := e.losable()
	minority := n - quorum
	if len(victims) <= minority {
		s.fail("only %d nodes can be taken away, need %d", len(victims), minority+1)
		return nil
	}
	s.say("")
	for _, nd := range victims[:minority] {
		lose(e, s, nd)
		up--
	}
	lock, err = l.TryAcquire(ctx, key, redlockTTL)
	s.result(label("acquire"), withFence(lock, err), err == nil && lock.Fence() > firstFence, fmt.Sprintf("ok with a fence above %d", firstFence))
	if err != nil {
		showNodes(e, s, err)
		return nil
	}
	defer lock.Release(context.WithoutCancel(ctx))
	err = lock.Extend(ctx, redlockTTL)
	s.result(label("extend"), outcome(err), err == nil, "ok")
	if err != nil {
		showNodes(e, s, err)
	}
	other, err := l.TryAcquire(ctx, key, redlockTTL)
	if other != nil {
		other.Release(ctx)
	}
	busy := errors.Is(err, dlock.ErrNotAcquired)
	s.result(fmt.Sprintf("B tries while A holds it (%d of %d up)", up, n), acquired(err), busy, "false (ErrNotAcquired)")
	if !busy && err != nil {
		showNodes(e, s, err)
	}
	err = lock.Release(ctx)
	s.result(label("release"), outcome(err), err == nil, "ok")

	// One more: now only a minority answers.
	s.say("")
	lose(e, s, victims[minority])
	up--
	lock, err = l.TryAcquire(ctx, key, redlockTTL)
	if lock != nil {
		lock.Release(ctx)
	}
	var qe *redlock.QuorumError
	refused := err != nil && errors.As(err, &qe) && qe.Got < qe.Need
	got := "ok (two holders would now be possible)"
	if err != nil {
		got = "refused (" + errName(err) + ")"
	}
	s.result(label("acquire"), got, refused, "refused: fewer than a majority granted it")
	if err != nil {
		if errors.Is(err, dlock.ErrUnavailable) {
			s.say("ErrUnavailable, not ErrNotAcquired: nobody else holds the lock; too few servers answered")
			s.say("to grant it, so a caller can tell an outage from a busy lock.")
		}
		showNodes(e, s, err)
	}
	return nil
}

func withFence(l *dlock.Lock, err error) string {
	if err != nil {
		return "refused (" + errName(err) + ")"
	}
	return fmt.Sprintf("ok (fence %d)", l.Fence())
}

// lose takes a node away and says how.
func lose(e *env, s *section, nd *node) {
	at := time.Now()
	defer func() { e.tl.Band(at, time.Now(), timeline.ServerFault, fmt.Sprintf("node %d lost", e.index(nd)+1)) }()
	nd.lose()
	nd.lost = true
	s.say("Node %d (%s) is %s.", e.index(nd)+1, nd.addr, nd.how)
}

// showNodes prints what each node answered, found with errors.As.
func showNodes(e *env, s *section, err error) {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		s.say("(no per-node report in the error: %v)", err)
		return
	}
	s.say("What each node said (a *redlock.QuorumError, found with errors.As): %d granted, %d needed.", qe.Got, qe.Need)
	for _, r := range qe.Nodes {
		nd := e.byClientAddr(r.Node)
		name, num := r.Node, "?"
		if nd != nil {
			name, num = nd.addr, fmt.Sprint(e.index(nd)+1)
		}
		what := "granted (released again, as the attempt failed)"
		if !r.OK {
			what = e.unrelay(r.Err.Error())
		}
		s.say("  node %s  %-21s %s", num, name, what)
	}
}

// losable lists the nodes the Redlock scenario may take away, in order:
// servers the demo started (it kills them) before the user's (it cuts them
// off), the last first, so node 1 goes last.
func (e *env) losable() []*node {
	var own, yours []*node
	for i := len(e.nodes) - 1; i >= 0; i-- {
		if nd := e.nodes[i]; nd.origin == "yours" {
			yours = append(yours, nd)
		} else {
			own = append(own, nd)
		}
	}
	return append(own, yours...)
}

func (e *env) index(nd *node) int {
	for i, m := range e.nodes {
		if m == nd {
			return i
		}
	}
	return -1
}

func (e *env) byClientAddr(addr string) *node {
	for _, nd := range e.nodes {
		if nd.client.Options().Addr == addr {
			return nd
		}
	}
	return nil
}

// unrelay rewrites the demo's relay addresses in a message into the servers
// they stand for.
func (e *env) unrelay(msg string) string {
	for _, nd := range e.nodes {
		if a := nd.client.Options().Addr; a != nd.addr {
			msg = strings.ReplaceAll(msg, a, "(the demo's relay to "+nd.addr+", now cut)")
		}
	}
	return msg
}

func describe(nd *node) string {
	switch nd.origin {
	case "yours":
		return "your server, Redis " + orUnknown(nd.version)
	case "embedded":
		return "embedded (miniredis)"
	}
	return "temporary redis-server, Redis " + orUnknown(nd.version)
}
