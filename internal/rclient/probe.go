package rclient

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Native says which of its own compare-and-delete and compare-and-set
// commands a server has (see Protocol in package redislock).
type Native struct {
	Release string // "delex", "delifeq", or "" (none: a script)
	SetIfEq bool   // SET key token PX ttl IFEQ token
}

// ReleaseArgs returns the command that deletes key if it holds token (for
// a Release not ""), whose reply is the number of keys deleted.
func (n Native) ReleaseArgs(key, token string) []any {
	if n.Release == "delifeq" {
		return []any{"delifeq", key, token}
	}
	return []any{"delex", key, "IFEQ", token}
}

// Probe asks the server behind c, in one round trip that changes nothing,
// which native commands it has (each tried on a missing key) and its
// maxmemory-policy ("" when CONFIG is denied). ok is false when the server
// did not answer: probe again later.
func Probe(ctx context.Context, c redis.UniversalClient, probeKey string) (n Native, policy string, ok bool) {
	pipe := c.Pipeline()
	delex := pipe.Do(ctx, "delex", probeKey, "IFEQ", "x")
	delifeq := pipe.Do(ctx, "delifeq", probeKey, "x")
	set := pipe.SetIFEQ(ctx, probeKey, "x", "y", time.Millisecond)
	cfg := pipe.ConfigGet(ctx, "maxmemory-policy")
	Exec(ctx, pipe)
	n, ok = decide(delex.Err(), delifeq.Err(), set.Err())
	if m, err := cfg.Result(); err == nil {
		policy = m["maxmemory-policy"]
	}
	return n, policy, ok
}

// decide reads the probe's replies: a command the server has answers 0 or
// nil on a missing key; one it lacks (or an ACL denies, or a proxy does
// not pass) answers an error. A command unanswered decides nothing.
func decide(delex, delifeq, set error) (n Native, ok bool) {
	for _, err := range []error{delex, delifeq, set} {
		if err != nil && err != redis.Nil && !IsReply(err) {
			return Native{}, false
		}
	}
	has := func(err error) bool { return err == nil || err == redis.Nil }
	switch {
	case has(delex):
		n.Release = "delex"
	case has(delifeq):
		n.Release = "delifeq"
	}
	n.SetIfEq = has(set)
	return n, true
}

// WarnEviction warns when a server's maxmemory-policy lets it evict keys
// before their TTL: an evicted lock key is a second holder.
func WarnEviction(logger *slog.Logger, node, policy string) {
	if policy != "" && policy != "noeviction" {
		logger.Warn("dlock: redis may evict lock keys before they expire; set maxmemory-policy noeviction",
			"node", node, "maxmemory-policy", policy)
	}
}
