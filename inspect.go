package dlock

import (
	"context"
	"time"
)

// An Inspector is a Locker that can list the locks held on its servers,
// for operators' questions: who holds it, for how long, how many wait.
// Every backend of this repository implements it.
type Inspector interface {
	// Inspect lists the held locks whose keys match pattern (a glob:
	// "*", "billing:*"), at most limit of them (0: a backend's default
	// bound), without blocking the servers (Redis: SCAN, never KEYS).
	// A lock taken or released during the listing may be missed or
	// reported.
	Inspect(ctx context.Context, pattern string, limit int) ([]LockInfo, error)
}

// LockInfo is one held lock as its backend sees it. Fields a backend
// cannot know are zero.
type LockInfo struct {
	Key     string        // as the Locker names it (without its prefix)
	Node    string        // the server that reported it (Redlock: one LockInfo per node)
	TTL     time.Duration // time left before the lock expires; 0: it has no TTL (PostgreSQL: held while the session lives)
	Fence   uint64        // the latest fence drawn for the key
	Token   string        // the holder's token, where the server keeps it
	Waiting int           // waiters queued behind the holder
	// Majority reports, on a quorum backend, whether a majority of the
	// nodes hold the key with this token; on others, true.
	Majority bool
	// Who holds it, where the holder published it (dlock run does; the
	// redislock's WithHolderInfo option does for library users) or the
	// server knows it (PostgreSQL: the session's pid, application name
	// and since when it holds the lock).
	Host    string
	PID     int
	Service string
	Since   time.Time
}
