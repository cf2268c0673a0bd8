// Package rclient holds the small facts about go-redis clients that every
// Redis-backed package of dlock needs: whether a client is nil, how errors
// should name it, whether context deadlines bound its calls.
package rclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// IsNil reports whether c is nil, including a typed nil go-redis client in
// an interface (which would panic on first use).
func IsNil(c any) bool {
	switch c := c.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// Name returns how errors name the server(s) behind c: the address of a
// single-node client, the seed addresses of a Cluster or Ring.
func Name(c any) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "cluster(" + strings.Join(c.Options().Addrs, ",") + ")"
	case *redis.Ring:
		return "ring(" + strings.Join(slices.Sorted(maps.Values(c.Options().Addrs)), ",") + ")"
	}
	return "redis"
}

// ContextTimeouts reports whether c lets context deadlines bound its socket
// reads; without it a frozen server holds a call for ReadTimeout. Unknown
// kinds of client report true: there is nothing to warn about.
func ContextTimeouts(c any) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// CtxErr returns the context's error, counting a deadline that has passed
// but whose timer has not fired yet: go-redis sets the socket deadline to
// the context's, so a read times out a moment before ctx.Err() turns
// non-nil, and the caller should still report the deadline.
func CtxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// IsReply reports whether err is an error reply from the server (NOPERM,
// WRONGTYPE, OOM, NOSCRIPT...), as opposed to a network failure or a
// timeout. redis.Nil is not an error reply.
func IsReply(err error) bool {
	var re redis.Error
	return err != redis.Nil && errors.As(err, &re)
}

// Describe returns err as a node's error whose message says what happened:
// the server's own reply (kept in the chain, so errors.As finds the
// redis.Error), no reply in time, or no connection. A timeout or
// cancellation is not kept in the chain: it is the node's failure, and must
// not match the caller's context errors (the caller adds its own when its
// context ended).
func Describe(err error) error {
	switch {
	case IsReply(err):
		return fmt.Errorf("the server answered with an error: %w", err)
	case errors.Is(err, context.DeadlineExceeded) || IsTimeout(err):
		return errors.New("no reply in time")
	case errors.Is(err, context.Canceled):
		return errors.New("request cancelled")
	}
	return fmt.Errorf("unreachable: %w", err)
}

// IsTimeout reports whether err is a network timeout.
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
