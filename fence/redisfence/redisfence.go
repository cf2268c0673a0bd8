package redisfence

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rclient"
)

//go:embed guard.lua
var guardSrc string

// guardScript runs by SHA; go-redis falls back to EVAL when the server
// answers NOSCRIPT (restart, failover, SCRIPT FLUSH).
var guardScript = redis.NewScript(guardSrc)

// Guard keeps fenced values in Redis. Each value lives in a hash at its own
// key, with the highest fence seen and a digest of the token that presented
// it; every operation is one Lua script, so the check and the change are
// atomic. Guard is safe for concurrent use.
type Guard struct {
	client redis.Scripter
	node   string // how errors name the server
}

// New returns a Guard over client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or anything else that runs scripts. It sends nothing to the
// server. Set ContextTimeoutEnabled on the client so that context
// deadlines bound every call. New returns an error matching dlock.ErrInvalid
// for a nil client.
func New(client redis.Scripter) (*Guard, error) {
	if nodeerr.IsNil(client) {
		return nil, bridge.Invalidf("redisfence: nil redis client")
	}
	return &Guard{client: client, node: rclient.Name(client)}, nil
}

// Register raises the highest fence of the value at key to fence, claiming
// it for token, without reading or writing the value. See Read for when to
// call it. It returns an error matching fence.ErrStale when fence is stale,
// dlock.ErrInvalid for bad arguments, dlock.ErrMisconfigured (with a
// *dlock.NodeError) when the server refused for a reason retrying cannot
// change (a wrong password, an ACL, a key that is not a guard's hash) and
// dlock.ErrUnavailable when it could not be reached or answered with
// another error.
func (g *Guard) Register(ctx context.Context, key string, fence uint64, token string) error {
	_, err := g.run(ctx, "register", key, fence, token, "")
	return err
}

// Read registers fence for token, exactly as Register does, and returns the
// value at key, in one atomic step; ok is false when nothing was written
// yet. A holder that will write what it computes from the value must read
// it this way: from then on a stale holder's late write is refused instead
// of landing between this read and the holder's write. Errors are those of
// Register.
func (g *Guard) Read(ctx context.Context, key string, fence uint64, token string) (value string, ok bool, err error) {
	reply, err := g.run(ctx, "read", key, fence, token, "")
	if err != nil {
		return "", false, err
	}
	if len(reply) == 3 {
		if v, isStr := reply[2].(string); isStr {
			return v, true, nil
		}
	}
	if len(reply) == 2 {
		return "", false, nil
	}
	return "", false, g.unexpected(ctx, "read", key, reply)
}

// Write stores value at key if fence is greater than the highest fence the
// key has seen, or equal to it and token is the holder that set it, and
// raises the highest fence: a compare-and-set, in one script. It returns an
// error matching fence.ErrStale when the fence is stale (nothing changed),
// dlock.ErrInvalid for bad arguments, dlock.ErrMisconfigured when the
// server refused (see Register), and dlock.ErrUnavailable (with a
// *dlock.NodeError) when the server could not be reached; the write may
// then have landed or not. Retrying it with the same fence and token is
// safe: the tie rule accepts the same holder again.
func (g *Guard) Write(ctx context.Context, key string, fence uint64, token, value string) error {
	_, err := g.run(ctx, "write", key, fence, token, value)
	return err
}

// Highest returns the highest fence the value at key has seen, 0 for a key
// never touched. It changes nothing.
func (g *Guard) Highest(ctx context.Context, key string) (uint64, error) {
	if err := g.check(ctx, "highest", key); err != nil {
		return 0, err
	}
	reply, err := g.eval(ctx, "highest", key, "0", "", "")
	if err != nil {
		return 0, err
	}
	if len(reply) == 2 {
		if s, ok := reply[1].(string); ok {
			if f, err := strconv.ParseUint(s, 10, 64); err == nil {
				return f, nil
			}
		}
	}
	return 0, g.unexpected(ctx, "highest", key, reply)
}

func (g *Guard) check(ctx context.Context, op, key string) error {
	if g == nil || g.client == nil {
		return bridge.Invalidf("redisfence: %s %q: nil Guard (use New)", op, key)
	}
	if ctx == nil {
		return bridge.Invalidf("redisfence: %s %q: nil context", op, key)
	}
	return nil
}

// run validates a fenced operation, runs the script and turns a stale
// answer into a *fence.StaleError.
func (g *Guard) run(ctx context.Context, op, key string, f uint64, token, value string) ([]any, error) {
	if err := g.check(ctx, op, key); err != nil {
		return nil, err
	}
	if err := fence.Validate(key, f, token); err != nil {
		return nil, err
	}
	reply, err := g.eval(ctx, op, key, strconv.FormatUint(f, 10), holder(token), value)
	if err != nil {
		return nil, err
	}
	if len(reply) == 0 {
		return nil, g.unexpected(ctx, op, key, reply)
	}
	if accepted, _ := reply[0].(int64); accepted == 1 {
		return reply, nil
	}
	if len(reply) == 3 {
		s, _ := reply[1].(string)
		tie, _ := reply[2].(int64)
		if highest, err := strconv.ParseUint(s, 10, 64); err == nil {
			return nil, &fence.StaleError{Op: op, Resource: key, Fence: f, Highest: highest, Tie: tie == 1}
		}
	}
	return nil, g.unexpected(ctx, op, key, reply)
}

func (g *Guard) eval(ctx context.Context, op, key, f, holder, value string) ([]any, error) {
	reply, err := guardScript.Run(ctx, g.client, []string{key}, op, f, holder, value).Slice()
	if err != nil {
		return nil, g.fail(ctx, op, key, err)
	}
	return reply, nil
}

// holder is what the guard stores instead of the token: the token proves
// ownership of the lock, and the guard's keys may be readable by more
// people than the lock's. Equality is all the tie rule needs.
func holder(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:16])
}

// fail classifies a network or server error (nodeerr.Error); when the
// context ended it also matches the context's error.
func (g *Guard) fail(ctx context.Context, op, key string, err error) error {
	return fmt.Errorf("redisfence: %s %q: %w", op, key, nodeerr.Error(ctx, g.node, err, rclient.Kind(err), false))
}

func (g *Guard) unexpected(ctx context.Context, op, key string, reply []any) error {
	ne := &dlock.NodeError{Node: g.node, Err: fmt.Errorf("unexpected script reply %v", reply)}
	return fmt.Errorf("redisfence: %s %q: %w: %w", op, key, dlock.ErrUnavailable, ne)
}
