// Package etcdlock is a dlock backend over etcd (go.etcd.io/etcd/client/v3):
// grants are Raft-replicated and linearizable, and the fence is the
// cluster's own revision. It is its own Go module, so that users of the
// Redis and PostgreSQL backends do not download etcd's dependencies.
//
// # Keys and wire compatibility
//
// The lock on key is a queue of keys under prefix+key+"/", one per
// contender, each named by its lease id in hex and created in a transaction
// only if absent. The owner is the key with the lowest create revision.
// This is the layout of concurrency.Mutex and `etcdctl lock`, so a Locker, a
// Mutex and etcdctl on the same name exclude each other and queue behind
// each other.
//
// # Fences
//
// A lock's fence is its key's create revision: the cluster's revision
// counter, strictly increasing across the whole cluster and assigned by
// consensus, so it survives the loss of any minority of members and needs
// no counter of its own.
//
// # Waiting
//
// Locker.Acquire and Locker.Do put their key in the queue once and watch the
// deletion of the key just ahead, as concurrency.Mutex does: waiters are
// served in arrival order, without polling, and a crashed holder's lease
// expiry wakes the next. A watch that loses its place to a compaction reads
// the key again. dlock.Acquire with a Locker instead retries TryAcquire,
// woken by a watch on the queue (ReleaseNotifier).
//
// # One lease per lock
//
// Each lock has its own lease with the lock's TTL, and its token is the
// lease id. A lease per Locker session would share one TTL between all locks
// of the session, and losing it would lose all of them at once; with a
// lease per lock, TTLs are per lock as on dlock's other backends, a lock
// lost is lost alone, and ReleaseToken and ExtendToken need only the key and
// the token: the key is prefix+key+"/"+token and the lease is the token. The
// cost is one lease grant per acquisition.
//
// etcd leases count whole seconds, and a cluster raises a lease below its
// minimum TTL (1.5 election timeouts) to that minimum. The lease is ttl
// rounded up; the lock's validity is computed from ttl, so the lease
// outlives the validity and never the other way round. Extend renews the
// lease (KeepAliveOnce) and checks that the key is still there; it cannot
// lengthen the lease beyond the TTL it was granted with.
//
// # Errors
//
// Every error matches exactly one of dlock's sentinels. A lease that expired
// or was revoked makes Extend and Release fail with dlock.ErrNotHeld (and
// dlock.Do cancels fn's context with dlock.ErrLockLost); an unreachable
// cluster gives dlock.ErrUnavailable with a *dlock.NodeError naming the
// endpoints.
//
// Exclusion is still lease-based: a holder paused past its lease is no
// longer the owner when it resumes. Fence the writes it makes (package
// fence) so that the stale one is refused.
package etcdlock
