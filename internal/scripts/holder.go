package scripts

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
)

//go:embed holder.lua
var holderSrc string

// Holder writes a lock's holder record beside it while the lock key holds
// the caller's token (holder.lua).
var Holder = redis.NewScript(holderSrc)

// WriteHolders returns the calls that write rec beside each of lockKeys
// for ttl, each only while its key holds token: after an acquire or an
// extend script in the same pipeline, they write only where it granted.
func WriteHolders(lockKeys []string, token, rec string, ttl time.Duration) []Call {
	ms := bridge.Milliseconds(ttl)
	calls := make([]Call, len(lockKeys))
	for i, k := range lockKeys {
		calls[i] = Call{Script: Holder, Keys: []string{k, keys.Holder(k)}, Args: []any{token, rec, ms}}
	}
	return calls
}

// DropHolders returns the call that deletes the holder records of
// lockKeys that are still rec (a later holder may have written its own).
func DropHolders(lockKeys []string, rec string) Call {
	hks := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		hks[i] = keys.Holder(k)
	}
	return Call{Script: Release, Keys: hks, Args: []any{rec, len(lockKeys)}}
}

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
	return PipelinedAfter(ctx, c, nil, calls...)
}

// PipelinedAfter is Pipelined with the commands that queue (when not nil)
// puts in the pipeline first, such as an INFO; they do not run again.
func PipelinedAfter(ctx context.Context, c redis.UniversalClient, queue func(redis.Pipeliner), calls ...Call) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	if queue != nil {
		queue(pipe)
	}
	for i, call := range calls {
		out[i] = call.Script.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	rclient.Exec(ctx, pipe)
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
