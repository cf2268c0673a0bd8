package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// inflight is one request sent to every node in parallel, whose replies
// are taken as they arrive.
type inflight[T any] struct {
	ch       chan int // the nodes whose out is written, as they are
	out      []T      // per node, to be read only where got is set
	got      []bool   // which nodes' replies were taken
	left     int      // replies not yet taken
	progress *progress
	stop     context.CancelFunc // called by the last call to return
}

// progress tells which nodes' calls of one fan-out have returned (nodes[i]
// is closed when node i's has), so that a later call to node i waits for
// node i's alone, not for the slowest.
type progress struct{ nodes []chan struct{} }

func newProgress(n int) *progress {
	p := &progress{nodes: make([]chan struct{}, n)}
	for i := range p.nodes {
		p.nodes[i] = make(chan struct{})
	}
	return p
}

// turn returns a channel closed once node i's call has returned, or nil
// when it has (or p is nil).
func (p *progress) turn(i int) <-chan struct{} {
	if p == nil {
		return nil
	}
	select {
	case <-p.nodes[i]:
		return nil
	default:
		return p.nodes[i]
	}
}

// errBehind: the Locker's earlier request to the node was still running a
// timeout after the send, so the acquisition's was not sent.
var errBehind = errors.New("still busy with this Locker's earlier request on the key after the node timeout (not sent)")

// sending says how send sends.
type sending struct {
	timeout time.Duration // for each node's call
	after   *progress     // if set, node i's call here starts after node i's there returned
	// giveUp: a call that waited a whole timeout for its turn is not sent
	// (its context ends with cause errBehind): for an acquisition the node
	// is as good as down, and a request not sent leaves no key behind.
	giveUp   bool
	progress *progress // if set, records this fan-out's progress
	finally  func()    // if set, runs once every call returned
}

// send runs f on every node in parallel and returns at once. The calls
// share one context with the timeout, cancelled by the last to return, so
// that taking only some replies cancels nothing. A call that waited for its
// turn (after) gets a whole timeout of its own from then, or a chain of
// waits could leave a release no time to be sent: an acquisition's call
// ends within two timeouts of its send, a release's within three. f
// rewrites timeout errors so that they do not match the caller's context
// errors: a node that did not answer in time is the node's failure.
func send[T any](ctx context.Context, l *Locker, s sending, f func(ctx context.Context, i int, n *node) T) *inflight[T] {
	n := len(l.nodes)
	c := &inflight[T]{
		ch:       make(chan int, n),
		out:      make([]T, n),
		got:      make([]bool, n),
		left:     n,
		progress: s.progress,
	}
	shared, stop := context.WithTimeout(ctx, s.timeout)
	c.stop = stop
	var running atomic.Int32
	running.Store(int32(n))
	for i, nd := range l.nodes {
		l.workers.run(func() {
			if turn := s.after.turn(i); turn != nil {
				nctx, cancel := s.waitTurn(ctx, turn)
				c.out[i] = f(nctx, i, nd)
				cancel()
			} else {
				c.out[i] = f(shared, i, nd)
			}
			if c.progress != nil {
				close(c.progress.nodes[i])
			}
			c.ch <- i
			if running.Add(-1) == 0 {
				c.stop()
				if s.finally != nil {
					s.finally()
				}
			}
		})
	}
	return c
}

// vote is send for a call after the acquisition, which returns only an
// error: a node found to be the same server as an earlier one fails at
// once, or its answer would count twice.
func vote(ctx context.Context, l *Locker, s sending, f func(ctx context.Context, i int, n *node) error) *inflight[error] {
	return send(ctx, l, s, func(ctx context.Context, i int, n *node) error {
		if d := n.dupOf.Load(); d != 0 {
			return fmt.Errorf("same server as node %s: skipped, its vote does not count twice", l.nodes[d-1].Name)
		}
		return f(ctx, i, n)
	})
}

// waitTurn waits for turn (or ctx's end: the call then fails unsent) and
// returns the context of the call that waited: a whole timeout from now,
// or, with giveUp after a timeout, one ended with cause errBehind.
func (s sending) waitTurn(ctx context.Context, turn <-chan struct{}) (context.Context, context.CancelFunc) {
	if !s.giveUp {
		select { // the earlier call ends within two timeouts of its send
		case <-turn:
		case <-ctx.Done(): // the call fails at once, unsent
		}
		return context.WithTimeout(ctx, s.timeout)
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case <-turn:
		return context.WithTimeout(ctx, s.timeout)
	case <-t.C:
		gave, cancel := context.WithCancelCause(ctx)
		cancel(errBehind)
		return gave, func() {}
	}
}

// next takes the next reply to arrive and returns its node's index, or -1
// when done (nil: never) is closed first.
func (c *inflight[T]) next(done <-chan struct{}) int {
	select {
	case i := <-c.ch:
		c.got[i] = true
		c.left--
		return i
	case <-done:
		return -1
	}
}

// all takes every reply not yet taken and returns them in node order.
func (c *inflight[T]) all() []T {
	for c.left > 0 {
		c.next(nil)
	}
	return c.out
}

// workers runs the calls of fan-outs on goroutines kept between them: a
// fresh goroutine grows its stack through go-redis's call path on every
// call, a kept one once (bench/RESULTS.md). An idle worker exits after
// workerIdle, long against the gap between a lock's calls, short enough
// that a Locker nobody closes leaves nothing running for long.
type workers struct {
	calls chan func()
	stop  context.Context    // done after close
	close context.CancelFunc // makes idle workers exit, busy ones once their call returns
}

const workerIdle = 100 * time.Millisecond

func newWorkers() workers {
	stop, cancel := context.WithCancel(context.Background())
	return workers{calls: make(chan func()), stop: stop, close: cancel}
}

// run runs f on an idle worker, or on a new one.
func (w *workers) run(f func()) {
	select {
	case w.calls <- f:
	default:
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-w.calls:
		case <-idle.C:
			return
		case <-w.stop.Done():
			return
		}
	}
}
