// Package redislock implements dlock's lock on a single Redis deployment —
// one node, a Sentinel group or a Cluster — through any go-redis v9
// UniversalClient.
//
// # Protocol
//
// An attempt runs one script, in one round trip: if the key is free it sets
// it to a fresh random token with the TTL (SET NX PX) and draws the lock's
// fence; else it reports the holder. The script checks everything before it
// writes and sets the lock key last, so an attempt that fails on an error
// reply (an ACL that denies dlock's keys, a key of the wrong type) changes
// nothing and returns the server's reply. A reply that retrying cannot
// change (NOAUTH, WRONGPASS, NOPERM, WRONGTYPE, READONLY from a replica,
// OOM, MISCONF, an unknown command) matches dlock.ErrMisconfigured, which
// Acquire and Do return at once; others (LOADING, BUSY) match
// dlock.ErrUnavailable.
//
// Release deletes the key only while it holds the token, and Extend resets
// its TTL only then, with the server's own command where it has one: DELEX
// key IFEQ token (Redis 8.4, Valkey 9.2) or DELIFEQ key token (Valkey 9.0)
// to release, SET key token PX ttl IFEQ token (Redis 8.4, Valkey 8.1) to
// extend a lock known only by its token (ExtendToken); elsewhere a script.
// A lock's own Extend always runs the script, which also renews its fence
// counter. The Locker probes for these commands once, on its first release
// or extension, in one round trip that changes nothing; there is no option.
// Scripts run by SHA and fall back to EVAL on NOSCRIPT, so SCRIPT FLUSH, a
// restart or a failover cost one round trip, not an error. The script paths
// are tested against redis-server 7.0 (a Cluster included), the DELEX
// release against miniredis; the DELIFEQ and SET IFEQ paths have not run
// against a server, only the probe's choice on their documented replies.
//
// # Concurrent calls
//
// On a single-node client (redis.NewClient, redis.NewFailoverClient) the
// scripts of concurrent calls go as a group commit: while one round trip is
// in flight, the calls that arrive wait and then go together, as one
// pipeline; a call alone goes at once (bench/RESULTS.md, D). Cluster and
// Ring clients send each call on its own. Each call keeps its own context:
// a waiting call returns when it ends, its script unsent, and a round trip
// is sent under the latest deadline of the calls it carries, so none is
// cut short by another's deadline or held past its own. An attempt
// whose context ends in flight returns at once; if the server granted it,
// the Locker releases the key when the reply comes. The cost is shared
// fate: a connection that stops answering holds every call in its round
// trip and behind it until their deadlines, or their try's bound (below).
//
// # Keys
//
// The lock key is the resource name, plus an optional prefix (WithPrefix),
// and its value is the token — the layout of node-redlock and redsync, so a
// fleet that mixes them with dlock on the same names excludes each other.
// dlock's own keys live in the "dlock:" namespace, in the lock key's
// Cluster slot (a key with a hash tag keeps it: "dlock:fence:t:key"); lock
// names inside it are rejected with dlock.ErrInvalid. An ACL user needs
// both: for example ~locks:* ~dlock:* &dlock:wake:* +@all.
//
//	key                    what                      lives
//	<key>                  the holder's token        the lock's TTL; deleted by the release
//	dlock:fence:{<key>}    the last fence drawn      WithFenceTTL after the last grant or extension (1h)
//	dlock:waiters:{<key>}  ids of waiting Lockers    while Lockers wait; 60s after the last one came by
//	dlock:holder:{<key>}   the holder record         with the lock (WithHolderInfo, elections)
//
// # Fences
//
// A grant draws max(counter + 1, the server's clock in microseconds) into
// the key's counter, in the script that sets the key. So fences increase
// from holder to holder, also after the counter is lost (expired, a restart
// without persistence, a promoted replica), as long as the server's clock
// does not step back, between the last grant before the loss and the first
// after, by more than the time between them; a lower fence's writes are
// then rejected by package fence's guards. Consecutive fences differ by the
// time between the grants (docs/fences.md).
//
// # Waiting
//
// Acquire and Do wait with wake-on-release. A waiting attempt that finds
// the key busy queues its Locker in the key's queue once the Locker is
// subscribed to "dlock:wake:<id>" (one pub/sub connection per Locker,
// opened by its first busy waiting attempt). The release deletes the key
// and, in the same round trip, pops the longest waiter and publishes on its
// channel; that Locker's earliest waiter retries at once and takes the key
// with an ordinary SET NX, as any other client (redsync, node-redlock,
// bsm/redislock) can. A Locker whose release just woke a waiter lets it go
// first for up to 50ms, so a loop over the lock does not starve the others.
// An expiry is not announced: the queue's head retries when its refusal
// said the key expires. A subscription silent for a second is pinged, and
// made again if no pong comes within a second (a NAT that dropped the flow
// sends no RST). Polling at the retry delay plus jitter covers the rest: a
// peer that does not publish, a lost message, a woken Locker that is gone.
//
// No state on the server holds the lock for a process that is gone: the key
// is the only grant. A queue entry of a crashed, partitioned or closed
// Locker costs the others at most one retry delay plus jitter; Close takes
// the Locker out of its queues.
//
// # Semaphores and elections
//
// A permit of Locker.Semaphore is a lock on one of the slot keys
// prefix+"{name}#0" to prefix+"{name}#(N-1)", granted by one script that
// checks the limit record "dlock:limit:t:"+prefix+"{name}#" and sets the
// lowest free slot (docs/semaphores.md). An election's grant writes the
// holder record with its identity (ReadTerm). A leader is as exclusive as
// the lock: not across a failover to a replica that missed the grant, where
// the fence stops the old leader's writes (docs/election.md).
//
// # Guarantees and limits
//
// On one node a lock is exclusive as long as the key lives: only a SET NX
// of a free key grants it; release and extension only touch a key that
// still holds the holder's token; and the validity deadline ends before the
// server's expiry. A failover to an asynchronous replica that lacks the
// key, or an eviction under memory pressure, loses it, not the order of
// fences; the Locker warns, once, when maxmemory-policy is not noeviction
// (docs/guarantees.md).
//
// Set ContextTimeoutEnabled on the go-redis client so that context
// deadlines bound each call; without it a server that never answers holds a
// call for the client's ReadTimeout (New logs a warning). With it, one try
// (an attempt, an extension or a release, with all it sends: the holder
// record, the probe, go-redis's retries) takes at most the client's
// DialTimeout + ReadTimeout, or the caller's deadline if sooner. A
// ReadTimeout of -1 leaves the bound to the caller's context.
package redislock
