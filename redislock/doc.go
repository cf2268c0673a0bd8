// Package redislock implements dlock's lock on a single Redis deployment —
// one node, a Sentinel group or a Cluster — through any go-redis v9
// UniversalClient.
//
// # Protocol
//
// An attempt sends SET key token NX PX ttl and INCR of the key's fence counter
// in one pipeline, one round trip: plain commands, which cost the server less
// than a script. The INCR's value is the lock's fence when the SET succeeded;
// a refused SET's INCR leaves a gap, and a second round trip runs the acquire
// script to say why (held, reserved, no expiry). A waiting attempt of a Locker
// already queued for the key runs one script instead (see Waiting). Release is
// DELEX key IFEQ token on Redis 8.4+ and a compare-and-delete script elsewhere
// that also checks for waiters; Extend is SET key token PX ttl IFEQ token on
// 8.4+ and a compare-and-PEXPIRE script elsewhere. Support for the 8.4
// commands is probed once per Locker (WithNativeCommands forces either path).
// Scripts run by SHA and fall back to EVAL when the server answers NOSCRIPT,
// so SCRIPT FLUSH, a restart or a failover cost one extra round trip, not an
// error.
//
// What was verified where: the script paths run against real redis-server
// 7.0 in this package's tests, including a three-master Cluster started by
// the test harness. No server that implements DELEX and SET IFEQ could be
// installed here; the native release (DELEX IFEQ) runs against miniredis, an
// in-process imitation that implements DELEX but not SET IFEQ, and the
// native extension path (SET IFEQ) is exercised only by a test showing that
// forcing it really sends the command. Treat NativeAlways on 8.4 as less
// tested than the scripts.
//
// # Keys
//
// The lock key is exactly the resource name, plus an optional prefix
// (WithPrefix), and its value is the token — the layout of node-redlock and
// redsync, so a fleet that mixes them with dlock on the same names still
// excludes each other. Only while a release hands the lock to a woken
// waiter through a reservation does the key hold
// "dlock:reserved:<Locker id>" instead, for at most 500ms (see Waiting). The fence counter lives in "dlock:fence:{key}"
// (or, when the key already has a Cluster hash tag, "dlock:fence:"+key), in
// the same Cluster slot as the lock key. Counters never expire: one small key
// per resource name.
//
// # Waiting
//
// Acquire and Do wait with wake-on-release: a waiting attempt that finds the
// key busy queues its Locker beside the key, in "dlock:waiters:{key}" (a
// sorted set in the key's slot, expiring 60 s after the last waiter refreshed
// it), and the release that frees the key pops the longest waiter, hands the
// lock to it and publishes to that Locker's own channel, in the same round
// trip. So one release wakes one waiter, in arrival order. The queue's state
// is kept in "dlock:turn:{key}", a small hash expiring with the queue.
//
// After a hold of at least 1ms the release grants the lock to the waiter
// directly: it sets the key to the token the waiter's refused attempt
// registered, draws the fence and publishes both, and the waiter's Acquire
// returns without another round trip (two per hand-off in all). Only a
// Locker whose subscription still receives the message is granted the lock;
// if its announcement is lost anyway, that Locker's next attempt sends the
// same token and finds the lock its own; a grant whose wait was given up is
// passed on. A Locker that hangs after it was granted the lock holds it for
// its TTL, as any holder that hangs does.
//
// After shorter holds, and on a Cluster (where PUBLISH cannot tell whether
// the waiter's Locker still listens), the release reserves the lock for the
// waiter (in the lock key, see Keys) and the woken waiter takes it with one
// round trip. A holder that re-takes the lock at once (a loop over the lock)
// may do so while the longest waiter has been first in line for less than
// 20ms; such releases skip the queue, and after that the waiter is woken or
// retries by itself and has the lock's first claim, so no waiter starves (the
// policy and its bound are described in notify.go). The reservation lasts
// until the woken waiter takes the lock or gives up, and at most 500ms if it
// crashed; TryAcquire honours it, reporting the lock reserved meanwhile, and
// so does every other client's SET NX.
//
// A program that gives up a wait and exits should call Close first: it takes
// the Locker out of the queues it waited in, so no release is reserved for,
// or granted to, a process that is gone (the dlock command does). Each Locker
// keeps one pub/sub connection for all its keys; Close ends it. A wake-up is
// only a hint — the grant still needs the lock key free, reserved for the
// woken Locker, or set to its token by the release itself. An expiry
// announces nothing (a holder that crashed), so the queue's head learns from
// its refused attempt when the key expires, and retries then by itself. A
// release by a peer that does not publish, or a lost message, is picked up
// by polling at the retry delay plus jitter. Neither the queue nor its
// state is ever part of a grant: the lock key alone is.
//
// # Guarantees and limits
//
// On one node a lock is exclusive as long as the key lives: only a SET NX, the
// reserved Locker's own script, or a release script that has just deleted the
// holder's key grants it; release and extension only touch a key that still
// holds the holder's token; and the validity deadline (the send time plus the
// TTL minus 1% + 2 ms; for a direct grant, from before the waiter's token was
// first sent) ends before the server's expiry. Fences increase from holder to holder: a granted SET's INCR runs
// while the lock is held (if the key expired in between, the attempt took
// longer than its TTL and is refused), and the next holder's SET comes after
// the release. It is not exclusive across a failover: Redis replicates
// asynchronously, so a promoted replica may lack both the key and the latest
// fence. Eviction under memory pressure removes lock keys early too; the
// Locker warns when maxmemory-policy is not noeviction. A holder that pauses
// past its TTL cannot be stopped by any lease: pass Fence to the resource
// (package fence).
//
// Set ContextTimeoutEnabled on the go-redis client so that context deadlines
// bound each call; without it a server that never answers holds a call for
// the client's ReadTimeout (New logs a warning).
package redislock
