// Package scripts holds the Lua scripts that the Redis backends run, as .lua
// files embedded at build time. Scripts run by SHA (EVALSHA) and go-redis
// falls back to EVAL when a server answers NOSCRIPT, so a restarted or
// failed-over server, or SCRIPT FLUSH, costs one extra round trip and no error.
package scripts

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed queue.lua
	queueSrc string
	//go:embed acquire_waiting.lua
	acquireWaitingSrc string
	//go:embed wake.lua
	wakeSrc string
	//go:embed leave.lua
	leaveSrc string
)

// Single-key lock scripts, shared by redislock and redlock (which runs them
// on every node).
var (
	// Acquire: KEYS lock, fence counter; ARGV token, ttl ms. Returns the
	// fence, 0 when busy, -1 when busy with a key that never expires, -2
	// when reserved for a woken waiter (redislock's queue).
	Acquire = redis.NewScript(acquireSrc)
	// Release: KEYS lock [, waiter queue, queue state, fence counter];
	// ARGV token [, "1" to allow a direct grant]. Returns 1 when deleted,
	// else 0; with the queue it also hands the lock on (queue.lua).
	Release = redis.NewScript(withQueue(releaseSrc))
	// Extend: KEYS lock; ARGV token, ttl ms. Returns 1 when extended, else 0.
	Extend = redis.NewScript(extendSrc)
)

// redislock's waiter queue (queue.lua; the design is in redislock/notify.go).
var (
	// AcquireWaiting: KEYS lock, fence counter, queue state, waiter queue;
	// ARGV token, ttl ms, Locker id, earlier place, keep ("1"), queue ttl
	// ms, hand-off threshold µs, reservation µs, register ("1": a refused
	// attempt registers token and ttl for a direct grant), back ("1": the
	// Locker comes back at once after releasing a short hold). A key that
	// holds the token already is won. Returns {fence | 0 | -1 |
	// -2, place in the queue, quiet µs (a release that soon may skip the
	// queue), ms until the holding key expires when the Locker heads the
	// queue (else -1)}.
	AcquireWaiting = redis.NewScript(withQueue(acquireWaitingSrc))
	// Wake: KEYS lock, waiter queue, queue state, fence counter; ARGV "1"
	// to allow a direct grant. Hands the lock on if the key is gone
	// (pipelined after DELEX). Returns 1 woken, 2 deferred, 0 nobody.
	Wake = redis.NewScript(withQueue(wakeSrc))
	// Leave: KEYS lock, waiter queue, queue state, fence counter; ARGV
	// Locker id, tokens of its nobody will take. Removes the Locker from
	// the queue and passes on a reservation, or a grant to one of the
	// tokens, it did not use. Returns 1 when it woke the next head.
	Leave = redis.NewScript(withQueue(leaveSrc))
)

// withQueue splices queue.lua's functions into src where it says so, after
// the paths that return without them (or in front, without the mark).
func withQueue(src string) string {
	before, after, ok := strings.Cut(src, "-- @queue.lua\n")
	if !ok {
		return queueSrc + src
	}
	return before + queueSrc + after
}
