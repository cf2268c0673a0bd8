// Package rclient knows go-redis clients and their errors for dlock's
// Redis packages, and probes a server's own commands.
package rclient

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/nodeerr"
)

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

// Timeouts returns how long one try on c may take: its dial plus its read
// timeout, or 0 when its reads have none or it does not say (a Ring, an
// unknown client). bound reports whether context deadlines bound its reads
// (an unknown client: true, nothing to warn of).
func Timeouts(c any) (try time.Duration, bound bool) {
	var dial, read time.Duration
	bound = true
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		dial, read, bound = o.DialTimeout, o.ReadTimeout, o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		dial, read, bound = o.DialTimeout, o.ReadTimeout, o.ContextTimeoutEnabled
	case *redis.Ring:
		dial, read = c.Options().DialTimeout, c.Options().ReadTimeout
	}
	if read <= 0 {
		return 0, bound
	}
	return dial + read, bound
}

// IsReply reports whether err is an error reply from the server, not a
// network failure or a timeout (nor redis.Nil).
func IsReply(err error) bool {
	var re redis.Error
	return err != redis.Nil && errors.As(err, &re)
}

// Kind says what kind of failure err, a go-redis call's, is.
func Kind(err error) nodeerr.Kind {
	if !IsReply(err) {
		return nodeerr.Unreachable
	}
	if slices.ContainsFunc(refusals, func(p string) bool { return redis.HasErrorPrefix(err, p) }) {
		return nodeerr.Refused
	}
	return nodeerr.Answered
}

// refusals begin the error replies that stay until someone changes the
// setup: credentials, an ACL, a key of another type, a replica (go-redis
// already retried the failovers that end it), no memory under noeviction,
// writes stopped by a failed save, a command renamed or a proxy's.
var refusals = []string{"NOAUTH", "WRONGPASS", "NOPERM", "WRONGTYPE", "READONLY", "OOM", "MISCONF", "unknown command"}

// Describe is nodeerr.Describe for the error of a go-redis call.
func Describe(err error) error { return nodeerr.Describe(err, Kind(err)) }

// Exec sends pipe's commands and gives each one that got no reply the
// pipeline's error: go-redis leaves a handshake's error reply (WRONGPASS,
// NOAUTH) off the commands, which would read as empty successes.
func Exec(ctx context.Context, pipe redis.Pipeliner) {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return
	}
	if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return errors.Is(c.Err(), err) }) {
		return // the error is a command's own reply
	}
	for _, c := range cmds {
		if c.Err() == nil {
			c.SetErr(err)
		}
	}
}
