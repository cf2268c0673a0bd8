package batch_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// These tests drive the Batcher's schedule with a sender that they
// control; redislock's tests run it against a real server.

// sent is one batch as the sender saw it.
type sent struct {
	ctx  context.Context
	cmds []redis.Cmder
}

// gate is a sender that reports each batch and returns only when released,
// answering each command with its own name.
type gate struct {
	batches chan sent
	release chan struct{}
}

func newGate() *gate { return &gate{batches: make(chan sent, 100), release: make(chan struct{})} }

func (g *gate) send(ctx context.Context, cmds []redis.Cmder) {
	g.batches <- sent{ctx, cmds}
	<-g.release
	for _, c := range cmds {
		c.(*redis.StatusCmd).SetVal(c.Name())
	}
}

func (g *gate) next(t *testing.T) sent {
	t.Helper()
	select {
	case s := <-g.batches:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no batch sent")
	}
	return sent{}
}

func cmd(name string) *redis.StatusCmd { return redis.NewStatusCmd(context.Background(), name) }

// call runs Do in a goroutine; the channel gets its error.
func call(b *batch.Batcher, ctx context.Context, c redis.Cmder) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Do(ctx, c) }()
	return ch
}

// waiting waits until n calls wait for b's next batch.
func waiting(t *testing.T, b *batch.Batcher, n int) {
	t.Helper()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if w := b.Waiting(); w != n {
			return fmt.Errorf("%d calls wait, want %d", w, n)
		}
		return nil
	})
}

func names(cmds []redis.Cmder) []string {
	var ns []string
	for _, c := range cmds {
		ns = append(ns, c.Name())
	}
	return ns
}

// A call alone goes at once, with its caller's own context; the calls that
// arrive while it is in flight go together in the next batch, and each
// returns with its own reply.
func TestCallsWaitingGoTogether(t *testing.T) {
	g := newGate()
	b := batch.NewFunc(g.send)
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "first")
	first := call(b, ctx, cmd("first"))
	if s := g.next(t); s.ctx != ctx || len(s.cmds) != 1 {
		t.Fatalf("a call alone: sent %v with another context, want it alone with its own", names(s.cmds))
	}
	var cmds []*redis.StatusCmd
	var errs []<-chan error
	for i := range 5 {
		c := cmd(fmt.Sprint("c", i))
		cmds = append(cmds, c)
		errs = append(errs, call(b, context.Background(), c))
	}
	waiting(t, b, 5)
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if s := g.next(t); len(s.cmds) != 5 {
		t.Fatalf("next batch %v, want the 5 waiting calls", names(s.cmds))
	}
	g.release <- struct{}{}
	for i, c := range cmds {
		if err := <-errs[i]; err != nil || c.Val() != c.Name() {
			t.Fatalf("call %s: %v, reply %q", c.Name(), err, c.Val())
		}
	}
}

// The next batch's sender is the waiting call with the latest deadline (no
// deadline being the latest), so no call in it is cut short; and the
// sender's own cancellation does not fail the others' commands.
func TestSenderHasTheLatestDeadline(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deadlines []time.Duration // 0: none
		want      time.Duration
	}{
		{"later deadline", []time.Duration{time.Second, 10 * time.Second, 5 * time.Second}, 10 * time.Second},
		{"no deadline", []time.Duration{time.Second, 0, 10 * time.Second}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			b := batch.NewFunc(g.send)
			first := call(b, context.Background(), cmd("first"))
			g.next(t)
			now := time.Now()
			var errs []<-chan error
			var cancels []context.CancelFunc
			for i, d := range tc.deadlines {
				ctx, cancel := context.WithCancel(context.Background())
				if d > 0 {
					ctx, cancel = context.WithDeadline(context.Background(), now.Add(d))
				}
				defer cancel()
				cancels = append(cancels, cancel)
				errs = append(errs, call(b, ctx, cmd(fmt.Sprint("c", i))))
				waiting(t, b, i+1)
			}
			g.release <- struct{}{}
			<-first
			s := g.next(t)
			if len(s.cmds) != len(tc.deadlines) {
				t.Fatalf("batch %v, want all %d waiting calls", names(s.cmds), len(tc.deadlines))
			}
			d, ok := s.ctx.Deadline()
			if tc.want == 0 && ok || tc.want > 0 && !d.Equal(now.Add(tc.want)) {
				t.Fatalf("batch deadline %v (set: %v), want now+%v", d.Sub(now), ok, tc.want)
			}
			latest := slices.Index(tc.deadlines, tc.want)
			if want := fmt.Sprint("c", latest); s.cmds[0].Name() != want {
				t.Fatalf("batch %v: sent by %s, want %s", names(s.cmds), s.cmds[0].Name(), want)
			}
			cancels[latest]()
			if err := s.ctx.Err(); err != nil {
				t.Fatalf("the sender's cancellation ended the batch's context: %v", err)
			}
			g.release <- struct{}{}
			for i, ch := range errs {
				if err := <-ch; err != nil && i != latest {
					t.Fatalf("c%d: %v", i, err)
				}
			}
		})
	}
}

// A waiting call whose context ends returns at once, and its command is
// never sent.
func TestWaitingCallLeavesAtItsDeadline(t *testing.T) {
	g := newGate()
	b := batch.NewFunc(g.send)
	first := call(b, context.Background(), cmd("first"))
	g.next(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Do(ctx, cmd("late"))
	var left *batch.LeftError
	if !errors.As(err, &left) || left.Sent || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a LeftError before sending, matching DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("returned %v after a 50ms deadline", took)
	}
	left.OnReply(func(redis.Cmder) { t.Error("OnReply ran for a command never sent") })
	g.release <- struct{}{}
	<-first
	if b.Waiting() != 0 {
		t.Fatalf("%d calls still wait", b.Waiting())
	}
	select {
	case s := <-g.batches:
		t.Fatalf("sent %v after its caller left", names(s.cmds))
	default:
	}
}

// A call whose context ends while its command is in flight returns at once
// with a LeftError; OnReply gets the command once its reply is in, whether
// it is asked before the reply comes or after.
func TestCallLeavingInFlightGetsItsReply(t *testing.T) {
	for _, afterReply := range []bool{false, true} {
		t.Run(fmt.Sprint("asked after the reply: ", afterReply), func(t *testing.T) {
			g := newGate()
			b := batch.NewFunc(g.send)
			first := call(b, context.Background(), cmd("first"))
			g.next(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			leaving := call(b, ctx, cmd("leaving"))
			waiting(t, b, 1)
			sender := call(b, context.Background(), cmd("sender")) // no deadline: it sends
			waiting(t, b, 2)
			g.release <- struct{}{}
			<-first
			if s := g.next(t); len(s.cmds) != 2 || s.cmds[0].Name() != "sender" {
				t.Fatalf("batch %v, want [sender leaving]", names(s.cmds))
			}
			cancel()
			err := <-leaving
			var left *batch.LeftError
			if !errors.As(err, &left) || !left.Sent || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want a LeftError in flight, matching Canceled", err)
			}
			replies := make(chan string, 1)
			onReply := func(c redis.Cmder) { replies <- c.(*redis.StatusCmd).Val() }
			if !afterReply {
				left.OnReply(onReply)
			}
			g.release <- struct{}{}
			if err := <-sender; err != nil {
				t.Fatal(err)
			}
			if afterReply {
				left.OnReply(onReply)
			}
			if got := <-replies; got != "leaving" {
				t.Fatalf("OnReply got %q, want the command's reply", got)
			}
		})
	}
}

// Many callers with short and absent deadlines over a sender that takes
// random time: every call returns its own reply or leaves by its deadline,
// no command is sent twice or after its caller left before sending, every
// batch's deadline is at least each of its calls', and every call that left
// in flight gets its reply.
func TestScheduleUnderLoad(t *testing.T) {
	type meta struct {
		deadline time.Time
		sends    atomic.Int32
	}
	var mu sync.Mutex
	all := map[redis.Cmder]*meta{}
	b := batch.NewFunc(func(ctx context.Context, cmds []redis.Cmder) {
		bd, bok := ctx.Deadline()
		for _, c := range cmds {
			mu.Lock()
			m := all[c]
			mu.Unlock()
			m.sends.Add(1)
			if !m.deadline.IsZero() && bok && bd.Before(m.deadline) || m.deadline.IsZero() && bok {
				t.Errorf("batch deadline %v earlier than a call's (%v)", bd, m.deadline)
			}
		}
		time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		for _, c := range cmds {
			c.(*redis.StatusCmd).SetVal(c.Name())
		}
	})
	var wg sync.WaitGroup
	var leftSent, replied atomic.Int32
	var neverSent sync.Map
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				c := cmd(fmt.Sprint(g, "/", i))
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				m := &meta{}
				if rand.IntN(3) > 0 {
					m.deadline = time.Now().Add(time.Duration(rand.IntN(1000)) * time.Microsecond)
					ctx, cancel = context.WithDeadline(ctx, m.deadline)
				}
				mu.Lock()
				all[c] = m
				mu.Unlock()
				err := b.Do(ctx, c)
				cancel()
				var left *batch.LeftError
				switch {
				case err == nil:
					if c.Val() != c.Name() {
						t.Errorf("%s: reply %q", c.Name(), c.Val())
					}
				case errors.As(err, &left) && left.Sent:
					leftSent.Add(1)
					left.OnReply(func(c redis.Cmder) {
						if c.(*redis.StatusCmd).Val() == c.Name() {
							replied.Add(1)
						}
					})
				case errors.As(err, &left):
					neverSent.Store(c, true)
				default:
					t.Errorf("%s: %v", c.Name(), err)
				}
				if !m.deadline.IsZero() && time.Since(m.deadline) > time.Second {
					t.Errorf("%s returned %v after its deadline", c.Name(), time.Since(m.deadline))
				}
			}
		})
	}
	wg.Wait()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if r, l := replied.Load(), leftSent.Load(); r != l {
			return fmt.Errorf("%d of the %d calls that left in flight got their reply", r, l)
		}
		return nil
	})
	for c, m := range all {
		n := m.sends.Load()
		_, never := neverSent.Load(c)
		if n > 1 || never && n != 0 || !never && n != 1 {
			t.Errorf("%s sent %d times (its caller left before sending: %v)", c.Name(), n, never)
		}
	}
	t.Logf("%d calls, %d left in flight, %d left before sending", len(all), leftSent.Load(), countMap(&neverSent))
}

func countMap(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}
