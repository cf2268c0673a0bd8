// Package redlock implements dlock's lock over N independent Redis masters
// (Redlock), with fencing tokens that stay monotonic when a minority of the
// nodes fail, including nodes that restart without their data.
//
//	locker, err := redlock.New([]redis.UniversalClient{c1, c2, c3, c4, c5})
//	err = locker.Do(ctx, "invoice:4821", 10*time.Second, func(ctx context.Context) error {
//		return ledger.Post(ctx, inv, dlock.LockFromContext(ctx).Fence())
//	})
//
// The handle is dlock's *dlock.Lock and the helpers are dlock's Acquire and
// Do, so code written against the single-node backend (redislock) works
// unchanged.
//
// # When to choose Redlock
//
// Use the lock you already have the infrastructure for, and add fencing when
// an overlap would corrupt data:
//
//   - One Redis node (package redislock): one server to run; it fails with
//     that server, and on failover to an asynchronous replica a lock (and its
//     fence) can be handed out twice. Good for efficiency locks: jobs that
//     should not run twice but survive it.
//   - Redlock (this package): three or five independent masters; survives
//     the loss of a minority of them. Without fencing it is not safe under
//     process pauses, long network delays or clock jumps on a node. It fits
//     when Redis is your coordination layer and the guarded resources span
//     services that share no database.
//   - PostgreSQL (package pglock): the database you already run; the lock
//     lives with the data and ends with the session, so for work that happens
//     inside one Postgres it is simpler and stronger. Its availability is the
//     database's.
//
// # Protocol
//
// An attempt (TryAcquire) runs one script on every node at once, each call
// bounded by the node timeout (WithNodeTimeout, 50ms by default). The script
// sets the key to a fresh random token with the TTL if it is free (or already
// holds this token), and reports the node's fence counter. The lock is held
// only if a majority (N/2+1) granted it and validity is left: the attempt's
// send time plus TTL minus drift (TTL × driftFactor + 2ms) must still be in
// the future when all rounds are done. Otherwise the attempt is undone on
// every node — including those whose reply was lost — before TryAcquire
// returns, so it leaves nothing behind that would split the next vote.
//
// An attempt does not wait for the slowest nodes when it need not: once a
// majority of distinct servers has granted it in the steady state (each of
// them incremented its fence counter to the same value, the highest any
// answering node allows, so there is nothing to write back), TryAcquire
// returns, and the other nodes' replies arrive while the lock is held. The
// fence is still above every earlier lock's: that lock's granting majority
// holds its fence and shares a node with this one's. Anything else (a
// refusal, a node without marker, counters that differ, a Locker that has
// not yet heard every node answer with a run_id of its own) waits for every
// reply. Likewise Release returns as soon as a majority has deleted the key
// (the lock is then free); the other nodes' deletions finish within the
// node timeout, even if ctx is cancelled. A request to a node is never sent
// before the same lock's previous request there has returned (a release
// after a late acquisition, or the same Locker's next attempt after a late
// release), and once its turn has come it has a whole node timeout of its
// own; an attempt whose turn has not come within one node timeout leaves
// that node out, unsent. So a late reply leaves no key behind, and one slow
// or paused node delays no request to the others. The exception is a node
// that holds a request past its timeout (a paused or overloaded server):
// it may run a request whose reply was given up on after the release
// meant to undo it, and that key then expires with its TTL.
//
// When the vote split (the nodes that refused name different holders, and no
// single holder can have a majority even counting the silent nodes), nobody
// holds the lock; TryAcquire then retries by itself after a random pause that
// grows with each split, a few times, so a one-shot attempt answers "busy"
// only when someone may really hold the lock. Acquire and Do wait between
// attempts with dlock's retry options (dlock.WithRetryCount, WithRetryDelay,
// WithRetryJitter, WithExtendThreshold — node-redlock's retryCount,
// retryDelay, retryJitter and automaticExtensionThreshold; WithDefaults sets
// them per Locker). TryAcquire never returns a lock with no validity left.
//
// Extend runs a compare-and-PEXPIRE on every node at once and succeeds only
// if a majority still held the token; the new validity is measured from
// before the requests were sent. Release deletes the keys that still hold the
// token on every node. Do cancels its function's context with
// dlock.ErrLockLost when an extension cannot reach a majority before the
// validity runs out.
//
// TryAcquireMulti, AcquireMulti and DoMulti lock several keys at once: one
// script per node sets all of them or none, the lock is held when a majority
// granted all, and extension and release act on all together. The handle's
// Key is the keys joined with commas.
//
// # Waiting
//
// A waiting Acquire or Do on one key does not only poll: the Locker
// implements dlock.ReleaseNotifier. When an attempt finds the key busy on a
// node, the Locker subscribes there (one pub/sub connection per node, shared
// by all its keys) and its next attempts queue its id in a FIFO beside the
// key, "dlock:waiters:{key}" (60s expiry, refreshed while waiting), in the
// same pipeline as the acquire script. Release deletes the key on each node
// and, in the same script, pops that node's queue head and publishes the key
// on the head's channel "dlock:wake:<id>"; the first such message from any
// node wakes the Locker's earliest waiter, which retries at once, usually
// within a round trip of the release. A wake-up is only a hint: the retry
// must still win a majority. An expiry announces nothing (a holder that
// crashed), so the Locker that heads a node's queue also learns when the
// key expires there, and a refused attempt makes it retry then by itself.
// Releases that announce nothing (node-redlock or other peers, dead nodes,
// lost messages) are found by polling at the retry delay plus jitter. Close
// ends the subscriptions (they also end when the clients are closed, or
// after 30s without waiters); AcquireMulti and DoMulti only poll. The lock
// key's format is unchanged.
//
// # Keys on each node
//
// The lock key is the resource name (plus WithPrefix) holding the token, as
// in node-redlock, so node-redlock clients and dlock on the same nodes and
// resource names exclude each other (the tests run both against each other).
// The fence counter is a hash in "dlock:redlock:fence:{key}" (FenceKey) with
// the counter and the epoch it was written under; each node also carries a
// marker hash, MarkerKey. Counters and markers never expire; they are one
// small key per resource name and one per node.
//
// # What it guarantees, and what it does not
//
// Redlock's exclusion rests on timing. Two holders never overlap provided
// that (1) the nodes' clocks and the client's monotonic clock tick at about
// the same rate (drift within driftFactor), (2) a holder stops using the lock
// by its validity deadline (ValidUntil; Do's context ends then at the
// latest), and (3) no node loses a lock key before its TTL: no restart
// without persistence within a TTL, no eviction (use maxmemory-policy
// noeviction), no clock jump on a node.
//
// Kleppmann's critique ("How to do distributed locking", 2016) is that these
// are the assumptions of a synchronous model: a GC pause, a long network
// delay or a clock jump breaks (2) or (3), and no lease can stop a holder that
// paused after its last check. antirez's answer ("Is Redlock safe?") is that
// clocks need only tick at the same rate, that delays during the acquisition
// are caught by the elapsed-time check (they are, here: every round counts
// against the validity), and that pauses after the acquisition hurt every
// lease-based lock. Both agree that a pause after the last check can only be
// stopped by the resource. Hence the fence: pass Fence to the resource (see
// dlock's fence guards), which rejects a write whose fence is below the
// highest it has seen. With fencing, an overlap costs a rejected write, not
// corrupted data.
//
// Delayed restarts. A node that restarts without persistence has forgotten
// its lock keys; if it rejoins within a TTL, a second client can gather a
// majority that includes it while the first still holds the lock (the tests
// show exactly that double grant). Restart a node without persistence only
// after the longest TTL in use has passed (or run appendonly yes with
// appendfsync always). A majority that crashes together then blocks every
// lock for one TTL.
//
// # Fencing
//
// A grant's fence is strictly greater than the fence of every grant of the
// same key that returned before it was requested, under the assumptions
// listed below; lock exclusion is not one of them.
//
// The basic rule: the acquire script increments the key's counter on each
// granting node; the fence is the largest counter among the nodes that
// answered (an unincremented counter counts as its value plus one); before
// the lock counts as held, the fence is written back (set if greater) to
// every granting node whose counter is below it, only while that node still
// holds the lock. In the steady state all counters agree and the write-back
// costs nothing. A later grant reads a majority, which shares a node with
// the majority that stored the earlier fence, so its maximum is above it.
//
// The trap: "a majority keeps its counters" is not enough. If {A,B,C} stored
// fence f and A and B restart empty, a later majority {A,B,D} shares only A
// and B with {A,B,C} — both forgot f — and reads a maximum below f, although
// C, D and E never lost anything (TestFenceAmnesiaInversion shows it with the
// rule switched off). The rule that prevents it: a counter counts toward the
// majority only if it is trusted, and a node that lost its memory serves no
// trusted counter until it has been given the current value again.
//
// How a lost memory is detected. Each node carries a marker (MarkerKey): a
// random epoch, the run_id of the server process that wrote it, and a trust
// level. Counters are tagged with the epoch they were written under. The
// scripts read the server's run_id (INFO server) and compare. On Redis 7.0
// and later the acquire script runs as a Redis Function, whose library
// reads INFO once per server process and keeps the run_id (INFO was about
// half the script's time on the server); dlock loads the library, named
// dlock_redlock_acquire_<hash of its code>, on first use, and Redis keeps
// it in its RDB and AOF files. A restart starts the library afresh, so the
// run_id is never stale. Where functions are not available (older
// servers, a user not allowed FUNCTION LOAD) the plain script runs:
//
//   - marker missing while other nodes have theirs: the node restarted empty
//     (or is new). It gets a new epoch with trust "own": only counters written
//     under that epoch — by a write-back — are trusted, so for each key it
//     counts again once one grant has written the fence back to it.
//   - marker present but written by another server process (run_id differs):
//     the node restarted from an RDB snapshot or an AOF that may lack recent
//     writes (its marker came back, its counters may be old). Same treatment:
//     a new epoch with trust "own" (TestFenceSnapshotRestore).
//   - every node answered and none has a marker: a new cluster. All get
//     trust "all": a missing counter is trusted as 0, since no fence was ever
//     issued. While some node does not answer and none of those that do has
//     a marker, nothing is decided and no fence is issued: a new cluster
//     needs every node to answer once (or Reseed).
//
// The fence is computed only from at least N/2+1 nodes with trusted counters
// for the key (from the whole acquisition round, not only the granting
// nodes). Why that suffices, by induction over grants in real-time order:
// let M be the nodes that stored fence f (|M| >= N/2+1) and T the N/2+1
// trusted nodes a later grant reads. T and M share a node, since |T|+|M| > N.
// That node is trusted, so either it kept f (a trusted counter was never
// lost, and counters only grow) or it lost f and was trusted again by a
// write-back, which carries a fence computed the same way after f was
// stored, hence above f. Either way the new maximum is above f. When fewer
// than N/2+1 trusted counters can be read, the attempt fails with
// ErrFenceUnavailable (matching dlock.ErrUnavailable) and the lock is
// released: no fence rather than a wrong one.
//
// Assumptions: (a) a node never loses part of its data without losing its
// marker or changing its run_id — true for restarts with or without
// persistence, not for counters deleted by hand or evicted (use
// noeviction); (b) the nodes never all lose their data at once: the cluster
// then looks new and fences start over — the guards at the resources reject
// the lower fences, and an operator must raise the counters above the highest
// fence the resources have seen (Reseed); (c) the decision that a cluster is new is
// taken from one round of replies, and a node that restarts empty within that
// very round while another client issues a fence is not covered; (d) a node
// does not crash, restart and get written back while an acquisition that it
// had already answered is still in flight — the write-back could then carry
// a fence computed before that acquisition stored its own. The
// delayed-restart rule above excludes (c) and (d): a node that stays down for
// the longest TTL rejoins after every acquisition in flight has ended.
//
// Operations. A node that rejoined ("own") is trusted again key by key as
// grants write fences back. Keys that are not used for a while stay
// untrusted on it; if more than a minority of nodes rejoined, such a key gets
// ErrFenceUnavailable until Rejoin has copied every counter from a trusted
// majority to the rejoined nodes and marked them trusted. Run Rejoin after
// restarting nodes without persistence (after the delayed-restart wait).
// When more than a minority lost their data at once, Rejoin refuses (a fence
// may be lost with them) and Reseed(floor) is the way out: every counter
// starts at a floor the operator knows to be above every fence issued. The
// alternative is to never lose an acknowledged write: appendonly yes with
// appendfsync always on every node; a restart is still detected (the run_id
// changes) and costs one write-back per key, but counters are not lost.
// WithFenceAmnesiaRule(false) trusts every counter; it is the negative
// control of the tests and safe only with such persistence and no snapshot
// restores.
//
// # Errors and configuration
//
// Failed attempts carry a *QuorumError (errors.As) with every node's answer;
// its Unwrap yields the sentinel (dlock.ErrNotAcquired when the lock was
// busy or the vote split, dlock.ErrUnavailable when fewer than a majority of
// nodes answered) and a *dlock.NodeError per failing node. A node that did
// not answer in time reports that, without matching context.DeadlineExceeded
// (which stays reserved for the caller's own context).
//
// New warns (WithLogger) for N < 3, an even N and two clients with the same
// address; a server reached through two clients under different names is
// found by its run_id and votes once. WithStrict(true) makes all of these
// errors. Nodes must be independent masters: a replica answers READONLY and
// counts as failed; Cluster and Ring clients are rejected.
//
// Client settings: set ContextTimeoutEnabled on each go-redis client so that
// the node timeout bounds the socket reads. go-redis retries a refused dial
// (DialerRetries, 5 by default, 100ms apart), which makes a dead node cost
// the whole node timeout; DialerRetries 1 makes it fail at once. After
// PoolSize failed dials go-redis fails fast for up to a second after the
// server is back.
//
// A Locker is safe for concurrent use.
package redlock
