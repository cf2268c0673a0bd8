package redlock

import (
	"context"
	"sync"
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
	// progress records which nodes' calls have returned (when
	// sending.progress is set), so that a later request to the same node can wait
	// for it: a release must not overtake a late acquisition on some node,
	// which would leave the key there until its TTL.
	progress *progress
	stop     context.CancelFunc
}

type indexed[T any] struct {
	i int
	v T
}

// progress tells which nodes' calls of one fan-out have returned.
type progress struct {
	returned atomic.Uint64 // bit i: node i's call returned (nodes 0-63)
	done     chan struct{} // closed when every call returned
}

func newProgress() *progress { return &progress{done: make(chan struct{})} }

// returnedOn reports whether node i's call is known to have returned
// (beyond 64 nodes only once all have).
func (p *progress) returnedOn(i int) bool {
	return i < 64 && p.returned.Load()&(1<<i) != 0 || p.returnedAll()
}

// returnedAll reports whether every call has returned.
func (p *progress) returnedAll() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// sending says how send sends.
type sending struct {
	timeout time.Duration // for each node's call
	// after, if set, is an earlier fan-out whose call to node i must have
	// returned before node i's call here starts.
	after    *progress
	progress *progress // if set, records this fan-out's progress
	finally  func()    // if set, runs once every call returned
}

// send runs f on every node in parallel and returns at once. The calls
// share one context with the timeout (see below for those that first wait
// for after), cancelled by the last of them to return, so that taking
// only some replies cancels nothing. f rewrites network and timeout errors
// so that they do not match the caller's context errors: a node that did
// not answer in time is the node's failure, not the caller's deadline.
func send[T any](ctx context.Context, l *Locker, s sending, f func(ctx context.Context, n *node) T) *inflight[T] {
	c := &inflight[T]{
		ch:       make(chan indexed[T], len(l.nodes)),
		out:      make([]T, len(l.nodes)),
		got:      make([]bool, len(l.nodes)),
		left:     len(l.nodes),
		progress: s.progress,
	}
	shared, stop := context.WithTimeout(ctx, s.timeout)
	c.stop = stop
	// Calls that must first wait for the earlier fan-out share a second
	// context, with twice the timeout: the earlier call ends within its
	// own timeout, which leaves this one at least a whole timeout.
	after, late := s.after, shared
	if after != nil && after.returnedAll() {
		after = nil
	}
	if after != nil {
		var stopLate context.CancelFunc
		late, stopLate = context.WithTimeout(ctx, 2*s.timeout)
		c.stop = func() { stop(); stopLate() }
	}
	var running atomic.Int32
	running.Store(int32(len(l.nodes)))
	for i, n := range l.nodes {
		l.workers.run(func() {
			nctx := shared
			if after != nil && !after.returnedOn(i) {
				<-after.done // beyond 64 nodes, waits for them all
				nctx = late
			}
			v := f(nctx, n)
			if p := c.progress; p != nil && i < 64 {
				p.returned.Or(1 << i)
			}
			c.ch <- indexed[T]{i, v}
			if running.Add(-1) == 0 {
				c.stop()
				if c.progress != nil {
					close(c.progress.done)
				}
				if s.finally != nil {
					s.finally()
				}
			}
		})
	}
	return c
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

// workers runs the calls of fan-outs on goroutines kept between them. A
// fresh goroutine grows its stack through go-redis's call path on every
// call (those stack copies were a tenth of a Redlock cycle's CPU in the
// client); a kept one grew it once. An idle worker exits after workerIdle
// (long against the gap between a lock's calls, short against a program's
// life: a Locker nobody closes leaves nothing running for long), or at
// once after Close.
type workers struct {
	calls chan func()
	stop  chan struct{}
	once  sync.Once
}

const workerIdle = 100 * time.Millisecond

func newWorkers() workers {
	return workers{calls: make(chan func()), stop: make(chan struct{})}
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
		case <-w.stop:
			return
		}
	}
}

// close makes idle workers exit, and busy ones once their call returns.
func (w *workers) close() { w.once.Do(func() { close(w.stop) }) }
