package bench

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/scripts"
	dlockredis "github.com/dlock-go/dlock/redislock"
)

// batcher is a group commit over one client, a trial for D: a command sent
// while a batch is in flight waits, with the others that arrive meanwhile,
// and the batch's sender hands the next batch, as one pipeline, to the first
// of them when its own returns. One goroutine's commands go one at a time.
// It starts no goroutine.
type batcher struct {
	c        *redis.Client
	mu       sync.Mutex
	inflight bool
	pending  []*batchReq
}

type batchReq struct {
	cmd  redis.Cmder
	lead bool          // woken to send the pending batch, not with its reply
	done chan struct{} // closed when cmd has its reply, or lead is set
}

// do sends cmd in the next batch and returns with its reply.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) error {
	r := &batchReq{cmd: cmd, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	if b.inflight {
		b.mu.Unlock()
		<-r.done
		if !r.lead {
			return cmd.Err()
		}
		b.mu.Lock()
	}
	b.inflight = true
	batch := b.pending
	b.pending = nil
	b.mu.Unlock()

	if len(batch) == 1 {
		_ = b.c.Process(ctx, cmd)
	} else {
		p := b.c.Pipeline()
		for _, q := range batch {
			_ = p.Process(ctx, q.cmd)
		}
		_, _ = p.Exec(ctx) // each command holds its own error
	}

	b.mu.Lock()
	if len(b.pending) > 0 {
		next := b.pending[0]
		next.lead = true
		close(next.done)
	} else {
		b.inflight = false
	}
	b.mu.Unlock()
	for _, q := range batch {
		if q != r {
			close(q.done)
		}
	}
	return cmd.Err()
}

// evalSha returns an EVALSHA of s, to send through a batcher (the script
// must be loaded: load does it).
func evalSha(ctx context.Context, s *redis.Script, ks []string, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(ks)+len(args))
	a = append(a, "evalsha", s.Hash(), len(ks))
	for _, k := range ks {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

func load(tb testing.TB, c *redis.Client, ss ...*redis.Script) {
	for _, s := range ss {
		if err := s.Load(context.Background(), c).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// batched are the raw and raw-lua cycles through one batcher per client.
var batched = []single{
	{"raw-batched", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		load(tb, c, rawRelease)
		b := &batcher{c: c}
		return func(key string) cycleFunc {
			return func(ctx context.Context) error {
				tok := token()
				set := redis.NewBoolCmd(ctx, "set", key, tok, "px", ttl.Milliseconds(), "nx")
				if err := b.do(ctx, set); err != nil && err != redis.Nil {
					return err
				}
				if !set.Val() {
					return errBusy
				}
				return b.do(ctx, evalSha(ctx, rawRelease, []string{key}, tok))
			}
		}
	}},
	{"raw-lua-batched", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		load(tb, c, scripts.Acquire, scripts.Release)
		b := &batcher{c: c}
		counterTTL := dlockredis.DefaultFenceTTL.Milliseconds()
		return func(key string) cycleFunc {
			ks, rel := []string{key, keys.Fence(key)}, []string{key, keys.Queue(key)}
			return func(ctx context.Context) error {
				tok := token()
				acq := evalSha(ctx, scripts.Acquire, ks, tok, ttl.Milliseconds(), counterTTL)
				if err := b.do(ctx, acq); err != nil {
					return err
				}
				if _, granted := acq.Val().(string); !granted {
					return errBusy
				}
				return b.do(ctx, evalSha(ctx, scripts.Release, rel, tok))
			}
		}
	}},
}

func init() { singles = append(singles, batched...) }
