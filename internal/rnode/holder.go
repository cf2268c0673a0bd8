package rnode

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
)

// writeHolders returns the calls that write rec beside each of lockKeys
// for ttl, each only while its key holds token (after an acquire or an
// extend script in a pipeline: only where it granted).
func writeHolders(lockKeys []string, token, rec string, ttl time.Duration) []call {
	ms := bridge.Milliseconds(ttl)
	calls := make([]call, len(lockKeys))
	for i, k := range lockKeys {
		calls[i] = call{Script: holderScript, Keys: []string{k, keys.Holder(k)}, Args: []any{token, rec, ms}}
	}
	return calls
}

// dropHolders returns the call that deletes the holder records of
// lockKeys that are still rec (a later holder may have written its own).
func dropHolders(lockKeys []string, rec string) call {
	hks := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		hks[i] = keys.Holder(k)
	}
	return call{Script: ReleaseScript, Keys: hks, Args: []any{rec, len(lockKeys)}}
}

// call is one script call of pipelined.
type call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// pipelined runs calls in order in one round trip, after the commands
// that before (if not nil) queues. From the first NOSCRIPT on, the calls
// run again, in order: those after it must be safe to repeat.
func pipelined(ctx context.Context, c redis.UniversalClient, before func(redis.Pipeliner), calls ...call) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	if before != nil {
		before(pipe)
	}
	for i, call := range calls {
		out[i] = call.Script.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	rclient.Exec(ctx, pipe)
	noScript := func(cmd *redis.Cmd) bool {
		return cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") // it allocates, even for nil
	}
	for j := slices.IndexFunc(out, noScript); j >= 0 && j < len(calls); j++ {
		out[j] = calls[j].Script.Run(ctx, c, calls[j].Keys, calls[j].Args...)
	}
	return out
}

// WriteHolders runs writeHolders' calls in one round trip.
func (n *Node) WriteHolders(ctx context.Context, lockKeys []string, token, rec string, ttl time.Duration) error {
	return pipelined(ctx, n.Client, nil, writeHolders(lockKeys, token, rec, ttl)...)[0].Err()
}
