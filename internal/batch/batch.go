// Package batch sends the commands of concurrent callers over one go-redis
// client as a group commit, with the rules users see in package redislock,
// "Concurrent calls" (the throughput it buys: bench/RESULTS.md, "Group
// commit in the library"). A batch is sent by the waiting caller with the
// latest deadline, under it, and carries only callers whose deadline is not
// later. A caller whose context ends while its command is in flight returns
// at once, and may ask for the reply when it comes, to undo the command's
// effect (LeftError.OnReply). The package starts no goroutine.
package batch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/rclient"
)

// Batcher is a group commit over one client, made by New.
type Batcher struct {
	// one sends a command alone (a one-element slice to many would cost
	// the lone call an allocation), many a batch; both leave the replies
	// in the commands.
	one  func(ctx context.Context, cmd redis.Cmder)
	many func(ctx context.Context, cmds []redis.Cmder)

	mu       sync.Mutex
	inflight bool       // a batch is being sent
	pending  []*request // waiting for the next batch, in arrival order
}

// New returns a Batcher that sends over c, more than one command as a
// pipeline.
func New(c *redis.Client) *Batcher {
	return &Batcher{
		one: func(ctx context.Context, cmd redis.Cmder) { _ = c.Process(ctx, cmd) }, // the error is in cmd
		many: func(ctx context.Context, cmds []redis.Cmder) {
			p := c.Pipeline()
			for _, cmd := range cmds {
				_ = p.Process(ctx, cmd)
			}
			rclient.Exec(ctx, p) // each command holds its own error
		},
	}
}

// state is where a waiting request is; b.mu guards it.
type state int8

const (
	queued  state = iota // in b.pending
	leading              // chosen to send the next batch
	sent                 // in the batch in flight
	replied              // its command holds its reply
	left                 // its caller returned while it was in flight
)

type request struct {
	cmd      redis.Cmder
	onReply  func(redis.Cmder) // LeftError.OnReply's
	deadline time.Time         // zero: none
	state    state
	done     chan struct{} // closed when state becomes leading or replied
}

// LeftError is the error of a call whose context ended before its reply.
// Sent tells whether the command may have reached the server. It unwraps
// to the context's error.
type LeftError struct {
	Err  error
	Sent bool

	b *Batcher
	r *request
}

// OnReply has fn called with the command once it holds its reply (or its
// batch's error), if Sent: at once, or on the goroutine that sent the
// batch, which fn must not block.
func (e *LeftError) OnReply(fn func(cmd redis.Cmder)) {
	if !e.Sent {
		return
	}
	e.b.mu.Lock()
	if e.r.state == left {
		e.r.onReply = fn
		e.b.mu.Unlock()
		return
	}
	e.b.mu.Unlock()
	fn(e.r.cmd) // replied already
}

func (e *LeftError) Error() string {
	if e.Sent {
		return fmt.Sprintf("%v (left the batch in flight)", e.Err)
	}
	return fmt.Sprintf("%v (left the queue before sending)", e.Err)
}

func (e *LeftError) Unwrap() error { return e.Err }

// Do sends cmd, in the next batch if one is in flight, and returns with its
// reply (the command's own error) or, when ctx ends first, a *LeftError;
// the caller must not touch cmd after a LeftError.
func (b *Batcher) Do(ctx context.Context, cmd redis.Cmder) error {
	b.mu.Lock()
	if !b.inflight {
		b.inflight = true
		b.mu.Unlock()
		b.one(ctx, cmd)
		b.finish(nil)
		return cmd.Err()
	}
	r := &request{cmd: cmd, state: queued, done: make(chan struct{})}
	r.deadline, _ = ctx.Deadline()
	b.pending = append(b.pending, r)
	b.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
	}
	b.mu.Lock()
	switch r.state {
	case queued:
		b.pending = slices.DeleteFunc(b.pending, func(q *request) bool { return q == r })
		b.mu.Unlock()
		return &LeftError{Err: ctx.Err()}
	case sent:
		r.state = left
		b.mu.Unlock()
		return &LeftError{Err: ctx.Err(), Sent: true, b: b, r: r}
	case replied:
		b.mu.Unlock()
		return cmd.Err()
	}
	// leading
	if err := ctx.Err(); err != nil {
		b.handOn()
		b.mu.Unlock()
		return &LeftError{Err: err}
	}
	batch := []*request{r}
	b.pending = slices.DeleteFunc(b.pending, func(q *request) bool {
		if later(q.deadline, r.deadline) {
			return false // for the next batch
		}
		batch = append(batch, q)
		return true
	})
	for _, q := range batch {
		q.state = sent
	}
	b.mu.Unlock()

	if len(batch) == 1 {
		b.one(ctx, cmd)
	} else {
		b.sendBatch(ctx, r.deadline, batch)
	}
	b.finish(batch)
	return cmd.Err()
}

// sendBatch sends the commands of batch under the sender's deadline (the
// batch's latest), without its cancellation, which is not the others'.
func (b *Batcher) sendBatch(ctx context.Context, deadline time.Time, batch []*request) {
	cmds := make([]redis.Cmder, len(batch))
	for i, q := range batch {
		cmds[i] = q.cmd
	}
	ctx = context.WithoutCancel(ctx)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	b.many(ctx, cmds)
}

// finish hands out the replies of a batch that returned and hands the
// next one on.
func (b *Batcher) finish(batch []*request) {
	var orphans []*request
	b.mu.Lock()
	for _, q := range batch {
		gone := q.state == left
		q.state = replied
		switch {
		case gone && q.onReply != nil:
			orphans = append(orphans, q)
		case !gone && q != batch[0]: // the sender is not waiting
			close(q.done)
		}
	}
	b.handOn()
	b.mu.Unlock()
	for _, q := range orphans {
		q.onReply(q.cmd)
	}
}

// handOn makes the waiting request with the latest deadline the sender of
// the next batch, or marks nothing in flight. b.mu must be held.
func (b *Batcher) handOn() {
	if len(b.pending) == 0 {
		b.inflight = false
		return
	}
	i := 0
	for j, q := range b.pending[1:] {
		if later(q.deadline, b.pending[i].deadline) {
			i = j + 1
		}
	}
	next := b.pending[i]
	b.pending = slices.Delete(b.pending, i, i+1)
	next.state = leading
	close(next.done)
}

// later reports whether deadline a is later than b; zero (none) is latest.
func later(a, b time.Time) bool {
	if a.IsZero() {
		return !b.IsZero()
	}
	return !b.IsZero() && a.After(b)
}

// Waiting reports how many calls wait for the next batch (for tests).
func (b *Batcher) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}
