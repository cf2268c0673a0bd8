// Package scripts holds the Lua scripts that the Redis backends run, as .lua
// files embedded at build time. redislock runs them on its server and
// redlock on each node: one acquire, one release and one extend script
// serve both, for one key or several. Scripts run by SHA (EVALSHA) and fall
// back to EVAL when a server answers NOSCRIPT, so a restarted or failed-over
// server, or SCRIPT FLUSH, costs one extra round trip and no error.
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
	//go:embed wake.lua
	wakeSrc string
)

var (
	// Acquire takes the lock on its keys and draws the fence (acquire.lua
	// says what it takes and returns).
	Acquire = redis.NewScript(acquireSrc)
	// Release deletes the lock keys that hold the token and wakes the
	// longest waiter of each (release.lua).
	Release = redis.NewScript(releaseSrc)
	// Extend resets the TTL of keys that hold the token (extend.lua).
	Extend = redis.NewScript(extendSrc)
	// Wake wakes the longest waiter of a free key, after DELEX (wake.lua).
	Wake = redis.NewScript(wakeSrc)
)
