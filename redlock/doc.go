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
// unchanged.
//
// When to choose Redlock over one Redis node or PostgreSQL is in package
// dlock's "Which backend".
//
// # Protocol
//
// An attempt (TryAcquire) runs one script on every node at once, each call
// bounded by the node timeout (WithNodeTimeout, 50ms by default). The script
// sets the key to a fresh random token with the TTL if it is free (or already
// holds this token) and draws the node's fence (see Fencing). The lock is held
// only if a majority (N/2+1) granted it and validity is left: the attempt's
// send time plus TTL minus drift (TTL × driftFactor + 2ms) must still be in
// the future when the majority has answered. Otherwise the attempt is undone
// on every node — including those whose reply was lost — before TryAcquire
// returns, so it leaves nothing behind that would split the next vote. A
// majority that answers and grants is all it takes, from a new deployment on
// and after any restarts; nothing needs an operator.
//
// An attempt does not wait for the slowest nodes: once a majority has granted
// it, TryAcquire returns, and the other nodes' replies arrive while the lock
// is held (until the Locker has heard every node answer once with a run_id of
// its own, it waits for every reply, so that one server reached through two
// clients never votes twice). Likewise Release returns as soon as a majority
// has deleted the key (the lock is then free); the other nodes' deletions
// finish within the node timeout, even if ctx is cancelled. A request to a
// node is never sent before the same lock's previous request there has
// returned (a release after a late acquisition, or the same Locker's next
// attempt after a late release), and once its turn has come it has a whole
// node timeout of its own; an attempt whose turn has not come within one node
// timeout leaves that node out, unsent. So a late reply leaves no key behind,
// and one slow or paused node delays no request to the others. The exception
// is a node that holds a request past its timeout (a paused or overloaded
// server): it may run a request whose reply was given up on after the release
// meant to undo it, and that key then expires with its TTL.
//
// The calls of concurrent attempts, releases and extensions to one node
// share its round trips, as a group commit (see package redislock,
// "Concurrent calls"); a call's node timeout includes its wait for the
// next round trip there, and a call that gives up on a node while its
// round trip is in flight has the keys it may have set there released when
// the reply comes.
//
// When the vote split (the nodes that refused name different holders, and no
// single holder can have a majority even counting the silent nodes), nobody
// holds the lock; TryAcquire then retries by itself after a random pause that
// grows with each split, a few times, so a one-shot attempt answers "busy"
// only when someone may really hold the lock. dlock.Acquire and dlock.Do
// wait between attempts with dlock's retry options (dlock.WithRetryCount,
// WithRetryDelay, WithRetryJitter, WithExtendThreshold — node-redlock's
// retryCount, retryDelay, retryJitter and automaticExtensionThreshold, given
// with each call). TryAcquire never returns a lock with no validity left.
//
// Extend runs a compare-and-PEXPIRE on every node at once and succeeds only
// if a majority still held the token; the new validity is measured from
// before the requests were sent. Release deletes the keys that still hold the
// token on every node. Do cancels its function's context with
// dlock.ErrLockLost when an extension cannot reach a majority before the
// validity runs out.
//
// Keys returns a Locker over several keys at once: one script per node sets
// all of them or none, the lock is held when a majority granted all, and
// extension and release act on all together. The key its TryAcquire is
// given names the group (the handle's Key), and dlock.Acquire, dlock.Do and
// every other helper work with it as with any Locker.
//
// # Waiting
//
// A waiting dlock.Acquire or dlock.Do on one key uses the wake-on-release of
// package redislock (see its documentation), on every node: the Locker
// queues in the key's queue on each node where it is subscribed (one pub/sub
// connection per node, opened by its first busy waiting attempt there), each
// node's release wakes that node's longest waiter, and the first wake-up
// from any node makes the Locker's earliest waiter retry. A wake-up is only
// a hint: the retry must still win a majority. Releases that announce
// nothing (node-redlock or other peers, dead nodes, lost messages) are found
// by polling at the retry delay plus jitter, and a queued Locker that is
// gone costs the others at most that. Close ends the subscriptions and
// leaves the queues; waits on a Keys Locker only poll.
//
// # Keys on each node
//
// Each node stores what a redislock server does (see "Keys" in package
// redislock): the lock key, the resource name (plus WithPrefix) holding
// the token, as in node-redlock, so node-redlock clients and dlock on the
// same nodes and names exclude each other; its fence counter, which
// expires WithFenceTTL after the last grant, extension or release that
// wrote it; its waiter queue; and with WithHolderInfo its holder record,
// deleted with the lock key. After locks are released and those times
// have passed, a node holds nothing of dlock's.
//
// # Leader election
//
// dlock.Lead, Leader, Observe and Campaign need nothing more on the nodes.
// The leader is what a majority reports: Leader (ReadTerm) reads each node's
// key, fence counter and holder record in one MULTI, names the token that a
// majority holds (nobody when a majority holds nothing), and returns an
// error matching dlock.ErrUnavailable, a *QuorumError, when the nodes are
// split or too few answer. An election's grant (one made with an identity)
// publishes the identity and its token in the holder record in its own
// round trip, and once a majority granted, the record again with the
// lock's fence (the largest of the majority's draws, which no node's
// counter need hold): one more round trip per grant, before TryAcquire
// returns.
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
// A GC pause, a long network delay or a clock jump breaks (2) or (3), and
// no lease can stop a holder that paused after its last check: the
// Kleppmann–antirez debate, summed up in package dlock ("What a lock can
// and cannot guarantee"). Delays during the acquisition are caught here
// (the whole attempt counts against the validity); a pause after it only
// the resource can stop. Hence the fence: pass Fence to the resource (see
// dlock's fence guards). With fencing, an overlap costs a rejected write,
// not corrupted data.
//
// Delayed restarts. A node that restarts without persistence has forgotten
// its lock keys; if it rejoins within a TTL, a second client can gather a
// majority that includes it while the first still holds the lock (the tests
// show exactly that double grant). Restart a node without persistence only
// after the longest TTL in use has passed (or run appendonly yes with
// appendfsync always). A majority that crashes together then blocks every
// lock for one TTL. Fences stay monotonic either way (see Fencing).
//
// # Fencing
//
// A grant's fence is strictly greater than the fence of every grant of the
// same key that returned before it was requested, under the assumption below;
// lock exclusion is not one of them.
//
// Each granting node draws max(its counter + 1, its clock in microseconds)
// and stores it; the lock's fence is the largest draw of the granting
// majority. The lock's release and each of its extensions raise every node's
// counter to the lock's fence. Releases and extensions by token
// (ReleaseToken, ExtendToken, `dlock release`) do not know the lock's fence:
// they read every node's counter and clock and raise the counters to the
// largest, which is at least the lock's fence when every node answered; when
// some node did not (its draw may have been the fence), to the largest plus
// the fence TTL, which bounds D below. A later grant's majority shares a node with
// the earlier one's, and that node's next draw is above the earlier fence:
// its counter was raised to it (the earlier holder released or extended), or
// the earlier key expired there at least a TTL after the earlier grant, or
// the node lost its counter (a restart without persistence, an expired or
// stale counter) and draws from its clock, which has moved on since.
//
// The assumption, in the same terms as Redlock's own: the nodes' clocks agree
// within D and never step back by more than D, where D is the shortest of
// the TTL minus the node timeout, the fence TTL (WithFenceTTL: a counter
// that expired after a release is a lost counter) and the time a node that
// lost its counter takes to come back (its restart; with the delayed-restart
// rule below, at least the TTL). Clocks kept by NTP agree within milliseconds. A node whose clock
// steps back further can hand out a fence below an earlier one; the guards at
// the resource (dlock's fence packages) then reject that holder's writes. The
// argument in full is in the repository's docs/fences.md.
//
// # Semaphores
//
// dlock.Semaphore over a Redlock Locker (Locker.Semaphore) grants a permit
// as a Redlock lock on one slot key of the name ("{name}#0" to
// "{name}#(N-1)", see dlock.Semaphore), the slots tried in order, one round of
// requests to every node per slot tried. A permit thus needs a majority of
// nodes on the same slot, so at most N are held whatever the partitions:
// two permits on one slot would need two majorities, which share a node. A
// semaphore that counted holders on each node and admitted on a majority of
// counts would not keep that promise: with 3 nodes and a limit of 2, holders
// counted on nodes {0,1}, {1,2} and {2,0} are three, each node counting
// two. Fences count per slot, by the rules of Fencing above. A release
// wakes the Locker's longest waiter for any slot of the name.
//
// The limit is recorded on each node, by the script that takes the slot
// there: a record whose TTL is kept at or above every permit's on that node
// (extensions raise it), and which is void once no slot of the name is held
// there. A node whose record has another limit refuses the slot. An attempt
// fails at once, also inside dlock.Acquire, with dlock.ErrInvalid ("limit
// conflict: the server has 5, this Locker 10") when so many nodes refused it
// for their limit that no majority is left (more than N minus the quorum),
// after releasing what it took on the other nodes; fewer such nodes count as
// refusals like a busy slot's, so that a stale record on a minority blocks
// nobody. While a permit is held, its majority keeps its limit, and an
// attempt with another limit meets that majority in a node that refuses it:
// Lockers that disagree on the limit never hold permits at the same time,
// unless SetLimit changed the limit in between.
//
// SetLimit writes the new limit on every node where a slot of the name is
// held, and succeeds when a majority recorded it (or when so few nodes hold
// a slot that no permit can be held: there is nothing to change); an
// attempt with the old limit then meets that majority in a node that
// refuses it. After a shrink the holders keep their permits; new permits go
// to the slots below the new limit, and a node grants none while it holds a
// slot at or above the new limit, so that no permit is granted while a
// holder above the new limit remains (every grant's majority meets that
// holder's in a node that refuses). A count of permits per node could not
// promise that, each node seeing only the permits whose majority included
// it; the price is that on Redlock a shrink waits for every holder above the
// new limit, even when fewer than the new limit are held in all. A node
// restarted empty within a TTL forgets its record with its slots, as it
// forgets a lock's key: the delayed-restart rule above covers records too.
//
// # Errors and configuration
//
// Failed attempts carry a *QuorumError (errors.As) with every node's
// answer and the sentinel it matches. A node that answers without the key
// (it restarted, the key expired) is not unavailable: a release that every
// node answered reports the lock released when a majority deleted it, and
// not held otherwise. A node that did not answer in time reports that,
// without matching context.DeadlineExceeded (which stays reserved for the
// caller's own context).
//
// New warns about a fleet that tolerates no failure or can split evenly
// (see New); a server reached through two clients under different names is
// found by its run_id and votes once. Nodes must be independent masters: a
// replica answers READONLY and counts as refusing.
//
// Client settings: set ContextTimeoutEnabled on each go-redis client so that
// the node timeout bounds the socket reads. go-redis retries a refused dial
// (DialerRetries, 5 by default, 100ms apart), which makes a dead node cost
// the whole node timeout; DialerRetries 1 makes it fail at once. After
// PoolSize failed dials go-redis fails fast for up to a second after the
// server is back.
package redlock
