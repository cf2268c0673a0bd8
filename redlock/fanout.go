package redlock

import (
	"context"
	"sync/atomic"
	"time"
)

// inflight is one request sent to every node in parallel, whose replies can
// be taken as they arrive: an acquisition or a release stops listening once
// a majority has answered as it hoped, and the other replies arrive later.
type inflight[T any] struct {
	ch   chan indexed[T]
	out  []T    // per node, valid where got is set
	got  []bool // which nodes have answered (or failed)
	left int    // replies not yet taken
	// each[i] is closed once node i's call has returned (with
	// sending.each or track), so that a later request to the same node can
	// wait for it: a release must not overtake a late acquisition on some
	// node, which would leave the key there until its TTL.
	each []chan struct{}
	stop context.CancelFunc
}

type indexed[T any] struct {
	i int
	v T
}

// sending says how send sends.
type sending struct {
	timeout time.Duration   // for each node's call
	after   []chan struct{} // if set, node i's call starts once after[i] is closed
	track   bool            // make inflight.each
	each    []chan struct{} // or use these (from newEach) as inflight.each
	finally func()          // if set, runs once every call returned
}

// send runs f on every node in parallel and returns at once. Without
// after, the calls share one context with the timeout, cancelled by the last
// of them to return, so that taking only some replies cancels nothing. f
// rewrites network and timeout errors so that they do not match the
// caller's context errors: a node that did not answer in time is the
// node's failure, not the caller's deadline.
func send[T any](ctx context.Context, l *Locker, s sending, f func(ctx context.Context, n *node) T) *inflight[T] {
	c := &inflight[T]{
		ch:   make(chan indexed[T], len(l.nodes)),
		out:  make([]T, len(l.nodes)),
		got:  make([]bool, len(l.nodes)),
		left: len(l.nodes),
	}
	c.each = s.each
	if s.track && c.each == nil {
		c.each = newEach(len(l.nodes))
	}
	shared := ctx
	if s.after == nil {
		shared, c.stop = context.WithTimeout(ctx, s.timeout)
	}
	var running atomic.Int32
	running.Store(int32(len(l.nodes)))
	for i, n := range l.nodes {
		go func() {
			nctx := shared
			if s.after != nil {
				<-s.after[i]
				var stop context.CancelFunc
				nctx, stop = context.WithTimeout(ctx, s.timeout)
				defer stop()
			}
			v := f(nctx, n)
			if c.each != nil {
				close(c.each[i])
			}
			c.ch <- indexed[T]{i, v}
			if running.Add(-1) == 0 {
				if c.stop != nil {
					c.stop()
				}
				if s.finally != nil {
					s.finally()
				}
			}
		}()
	}
	return c
}

func newEach(n int) []chan struct{} {
	each := make([]chan struct{}, n)
	for i := range each {
		each[i] = make(chan struct{})
	}
	return each
}

// next takes the next reply to arrive and returns its node's index.
func (c *inflight[T]) next() int {
	return c.take(<-c.ch)
}

// nextCtx is next, or -1 when ctx ends first.
func (c *inflight[T]) nextCtx(ctx context.Context) int {
	select {
	case r := <-c.ch:
		return c.take(r)
	case <-ctx.Done():
		return -1
	}
}

func (c *inflight[T]) take(r indexed[T]) int {
	c.out[r.i], c.got[r.i] = r.v, true
	c.left--
	return r.i
}

// all takes every reply not yet taken and returns them in node order.
func (c *inflight[T]) all() []T {
	for c.left > 0 {
		c.next()
	}
	return c.out
}

// fanOut runs f on every node in parallel, bounded by timeout, and returns
// the results in node order once all calls returned.
func fanOut[T any](ctx context.Context, l *Locker, timeout time.Duration, f func(ctx context.Context, n *node) T) []T {
	return send(ctx, l, sending{timeout: timeout}, f).all()
}
