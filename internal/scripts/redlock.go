package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed redlock_acquire.lua
	redlockAcquireSrc string
	//go:embed redlock_writeback.lua
	redlockWritebackSrc string
	//go:embed redlock_marker.lua
	redlockMarkerSrc string
	//go:embed redlock_extend.lua
	redlockExtendSrc string
	//go:embed redlock_release.lua
	redlockReleaseSrc string
	//go:embed redlock_rejoin.lua
	redlockRejoinSrc string
)

// Redlock scripts: one per node and operation, each handling one or several
// lock keys (multi-resource locks are all or nothing on every node). The
// node marker and the epoch-tagged fence counters are explained in the
// redlock package documentation.
var (
	// RedlockAcquire: KEYS marker, lock keys, counter keys; ARGV token, ttl
	// ms, rule "1"/"0", new epoch, "acquire"/"read". Returns {status, run_id,
	// epoch, marker state, trust, holder, n1, flag1, ...}. A Function: it
	// needs the run_id on every run, which a function reads once.
	RedlockAcquire = newFunction("redlock_acquire", redlockAcquireSrc)
	// RedlockWriteback: KEYS marker, lock keys, counter keys; ARGV token,
	// fence, rule, epoch. Returns 1 when written.
	RedlockWriteback = redis.NewScript(redlockWritebackSrc)
	// RedlockMarker: KEYS marker; ARGV epoch, trust, run_id. Returns 1 when
	// created.
	RedlockMarker = redis.NewScript(redlockMarkerSrc)
	// RedlockExtend: KEYS lock keys; ARGV token, ttl ms. Returns 1 or 0.
	RedlockExtend = redis.NewScript(redlockExtendSrc)
	// RedlockRelease: KEYS lock keys [, their waiter queues]; ARGV token [,
	// number of lock keys when queues follow: each deletion then wakes its
	// queue's head]. Returns the keys deleted.
	RedlockRelease = redis.NewScript(redlockReleaseSrc)
	// RedlockRejoin: KEYS marker, counter keys; ARGV epoch, "seed" and
	// values, or "promote" and floor. Returns 1, or 0 if the node changed.
	RedlockRejoin = redis.NewScript(redlockRejoinSrc)
)
