// Package scripts holds the Lua scripts that the Redis backends run, as .lua
// files embedded at build time. Scripts run by SHA (EVALSHA) and go-redis
// falls back to EVAL when a server answers NOSCRIPT, so a restarted or
// failed-over server, or SCRIPT FLUSH, costs one extra round trip and no error.
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
)

// Single-key lock scripts, shared by redislock and redlock (which runs them
// on every node).
var (
	// Acquire: KEYS lock, fence counter; ARGV token, ttl ms. Returns the
	// fence, 0 when busy, -1 when busy with a key that never expires.
	Acquire = redis.NewScript(acquireSrc)
	// Release: KEYS lock; ARGV token. Returns 1 when deleted, else 0.
	Release = redis.NewScript(releaseSrc)
	// Extend: KEYS lock; ARGV token, ttl ms. Returns 1 when extended, else 0.
	Extend = redis.NewScript(extendSrc)
)
