// Package redlock implements dlock's lock over N independent Redis masters
// (Redlock), with fencing tokens that stay monotonic through node restarts,
// also without persistence and of every node at once.
//
//	locker, err := redlock.New([]redis.UniversalClient{c1, c2, c3, c4, c5})
//	err = dlock.Do(ctx, locker, "invoice:4821", 10*time.Second, func(ctx context.Context) error {
//		return ledger.Post(ctx, inv, dlock.LockFromContext(ctx).Fence())
//	})
//
// The handle is dlock's *dlock.Lock and the helpers are dlock's Acquire and
// Do, so code written against the single-node backend (redislock) works
// unchanged. When to choose Redlock is in package dlock's "Which backend".
//
// # Protocol
//
// An attempt (TryAcquire) runs one script on every node at once, each call
// bounded by the node timeout (WithNodeTimeout). The script sets the key to
// a fresh random token with the TTL if it is free (or already holds this
// token) and draws the node's fence. The lock is held only if a majority
// (N/2+1) granted it and validity is left: the attempt's send time plus TTL
// minus drift (TTL × driftFactor + 2ms) must still be in the future when the
// majority has answered. Otherwise the attempt is undone on every node,
// including those whose reply was lost, before TryAcquire returns, so it
// leaves nothing behind that would split the next vote. No operator is ever
// needed: a majority that answers and grants is enough, from a new
// deployment on and after any restarts.
//
// TryAcquire returns once a majority has granted (it waits for every node
// until each has answered once with a run_id of its own, so that one server
// reached through two clients never votes twice). Extend runs a
// compare-and-PEXPIRE on every node and succeeds if a majority still held
// the token; the new validity counts from before the requests were sent.
// Release deletes the keys that still hold the token and returns once a
// majority has; the other nodes finish within the node timeout, even if ctx
// is cancelled. Do cancels its function's context with dlock.ErrLockLost
// when an extension cannot reach a majority before the validity runs out.
//
// A request to a node is sent only after the same lock's previous request
// there returned (a release after a late acquisition, the next attempt
// after a late release), and then has a whole node timeout of its own; an
// attempt whose turn has not come within one node timeout leaves that node
// out, unsent. So a late reply leaves no key behind, and one slow node
// delays no request to the others, except a node that holds a request past
// its timeout (a paused server): it may run a request given up on after the
// release meant to undo it, and that key expires with its TTL.
//
// Concurrent calls to one node share its round trips, as a group commit
// (see package redislock, "Concurrent calls"); a call's node timeout
// includes its wait for the next round trip, and a call that gives up on a
// node while its round trip is in flight has the keys it may have set there
// released when the reply comes.
//
// When the vote split (no single holder the refusing nodes name can have a
// majority, even counting the silent nodes), nobody holds the lock;
// TryAcquire retries by itself a few times after a random pause that grows
// with each split, so a one-shot attempt answers "busy" only when someone
// may really hold the lock. It never returns a lock with no validity left.
// dlock.Acquire and dlock.Do wait between attempts with dlock's retry
// options (node-redlock's retryCount, retryDelay, retryJitter and
// automaticExtensionThreshold are dlock.WithRetryCount, WithRetryDelay,
// WithRetryJitter and WithExtendThreshold).
//
// # Waiting
//
// A waiting dlock.Acquire or dlock.Do on one key uses redislock's
// wake-on-release on every node: each node's release wakes that node's
// longest waiter, and the first wake-up from any node makes the Locker's
// earliest waiter retry, which must still win a majority. Releases that
// announce nothing (other clients, dead nodes, lost messages) are found by
// polling at the retry delay plus jitter, and a queued Locker that is gone
// costs the others at most that. Waits on a Keys Locker only poll.
//
// # Keys on each node
//
// Each node stores what a redislock server does (see "Keys" in package
// redislock), so node-redlock clients and dlock on the same nodes and names
// exclude each other. The fence counter expires WithFenceTTL after the last
// grant, extension or release that wrote it; after that, a node holds
// nothing of dlock's for a released lock.
//
// # What it guarantees, and what it does not
//
// Redlock's exclusion rests on timing. Two holders never overlap provided
// that (1) the nodes' clocks and the client's monotonic clock tick at about
// the same rate (drift within driftFactor), (2) a holder stops using the lock
// by its validity deadline (ValidUntil; Do's context ends then at the
// latest), and (3) no node loses a lock key before its TTL: no restart
// without persistence within a TTL, no eviction (use maxmemory-policy
// noeviction: the Locker warns about each node that may evict, when it first
// reaches it), no clock jump on a node.
//
// A GC pause, a long network delay or a clock jump breaks (2) or (3), and no
// lease can stop a holder that paused after its last check (package dlock,
// "What a lock can and cannot guarantee"). Delays during the acquisition are
// caught here (the whole attempt counts against the validity); a pause after
// it only the resource can stop: pass Fence to it (dlock's fence guards),
// and an overlap costs a rejected write, not corrupted data.
//
// Delayed restarts. A node that restarts without persistence has forgotten
// its lock keys; if it rejoins within a TTL, a second client can gather a
// majority that includes it while the first still holds the lock. Restart a
// node without persistence only after the longest TTL in use has passed (or
// run appendonly yes with appendfsync always). A majority that crashes
// together then blocks every lock for one TTL. Fences stay monotonic either
// way.
//
// # Fencing
//
// A grant's fence is strictly greater than the fence of every grant of the
// same key that returned before it was requested, provided the nodes'
// clocks agree within D and never step back by more than D, D being the
// shortest of the TTL minus the node timeout, the fence TTL (WithFenceTTL)
// and the time a node that lost its counter takes to come back (at least a
// TTL, by the delayed-restart rule); lock exclusion is not assumed. A node
// whose clock steps back further can hand out a lower fence, whose writes
// the guards at the resource then reject. The rule (the lock's fence is the
// largest of its majority's draws) and its argument are in docs/fences.md.
//
// # Elections and semaphores
//
// dlock.Lead, Leader, Observe and Campaign need nothing more on the nodes:
// the leader is the token a majority of the nodes holds (see ReadTerm).
// A permit of dlock.Semaphore is a Redlock lock on one slot key of the
// name, the slots tried in order, and needs a majority of nodes on the same
// slot, so at most N are held whatever the partitions. A node whose
// recorded limit differs refuses the slot; the attempt fails at once with
// dlock.ErrInvalid when no majority is left without those nodes. The limit
// rules, SetLimit and shrinking are in docs/semaphores.md.
//
// # Errors and configuration
//
// Failed operations carry a *QuorumError with every node's answer. A node
// that answers without the key (it restarted, the key expired) is not
// unavailable: a release that every node answered reports the lock released
// when a majority deleted it, and not held otherwise. A node that did not
// answer in time does not match context.DeadlineExceeded, which stays the
// caller's own context's.
//
// Nodes must be independent masters: a replica answers READONLY and counts
// as refusing.
//
// Client settings: set ContextTimeoutEnabled on each go-redis client so that
// the node timeout bounds the socket reads. go-redis retries a refused dial
// (DialerRetries, 5 by default, 100ms apart), which makes a dead node cost
// the whole node timeout; DialerRetries 1 makes it fail at once. After
// PoolSize failed dials go-redis fails fast for up to a second after the
// server is back.
package redlock
