package scripts

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed holder.lua
var holderSrc string

// Holder writes a lock's holder record beside it while the lock key holds
// the caller's token (holder.lua).
var Holder = redis.NewScript(holderSrc)

// Call is one script call of Pipelined.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// Pipelined runs calls in order in one round trip (EVALSHA). From the
// first call the server did not know (NOSCRIPT) on, each call runs again
// with Run, in order: the calls after it must be safe to repeat.
func Pipelined(ctx context.Context, c redis.UniversalClient, calls ...Call) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, call := range calls {
		out[i] = call.Script.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range out {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			for j := i; j < len(calls); j++ {
				out[j] = calls[j].Script.Run(ctx, c, calls[j].Keys, calls[j].Args...)
			}
			break
		}
	}
	return out
}
