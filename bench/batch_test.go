package bench

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rnode"
)

func load(tb testing.TB, c *redis.Client, ss ...*redis.Script) {
	for _, s := range ss {
		if err := s.Load(context.Background(), c).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// batched are the raw and raw-lua cycles through one group commit per
// client (internal/batch, as redislock sends its scripts on a single-node
// client): raw-batched is the ceiling of a batched lock, raw-lua-batched
// dlock's scripts without the rest of the library.
var batched = []single{
	{"raw-batched", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		load(tb, c, rawRelease)
		b := batch.New(c)
		return func(key string) cycleFunc {
			return func(ctx context.Context) error {
				tok := token()
				set := redis.NewBoolCmd(ctx, "set", key, tok, "px", ttl.Milliseconds(), "nx")
				if err := b.Do(ctx, set); err != nil && err != redis.Nil {
					return err
				}
				if !set.Val() {
					return errBusy
				}
				return b.Do(ctx, rnode.Cmd(ctx, rawRelease, nil, []string{key}, []any{tok}))
			}
		}
	}},
	{"raw-lua-batched", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		load(tb, c, rnode.AcquireScript, rnode.ReleaseScript)
		b := batch.New(c)
		counterTTL := backend.FenceTTL.Milliseconds()
		return func(key string) cycleFunc {
			ks, rel := []string{key, keys.Fence(key)}, []string{key, keys.Queue(key)}
			return func(ctx context.Context) error {
				tok := token()
				acq := rnode.Cmd(ctx, rnode.AcquireScript, nil, ks, []any{tok, ttl.Milliseconds(), counterTTL})
				if err := b.Do(ctx, acq); err != nil {
					return err
				}
				if _, granted := acq.Val().(string); !granted {
					return errBusy
				}
				return b.Do(ctx, rnode.Cmd(ctx, rnode.ReleaseScript, nil, rel, []any{tok}))
			}
		}
	}},
}

func init() { singles = append(singles, batched...) }
