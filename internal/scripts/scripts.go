// Package scripts holds the Lua scripts that the Redis backends run, as .lua
// files embedded at build time. redislock runs them on its server and
// redlock on each node: one acquire, one release and one extend script
// serve both, for one key or several. Scripts run by SHA (EVALSHA) and fall
// back to EVAL when a server answers NOSCRIPT, so a restarted or failed-over
// server, or SCRIPT FLUSH, costs one extra round trip and no error.
package scripts

import (
	_ "embed"
	"fmt"

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

// ReleaseReply reads the release script's reply: the number of keys
// deleted, and of waiters woken.
func ReleaseReply(v any, err error) (deleted, woken int64, _ error) {
	if err != nil {
		return 0, 0, err
	}
	switch v := v.(type) {
	case int64:
		return v, 0, nil
	case []any:
		if len(v) == 2 {
			n, ok1 := v[0].(int64)
			w, ok2 := v[1].(int64)
			if ok1 && ok2 {
				return n, w, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("unexpected reply %v from the release script", v)
}
