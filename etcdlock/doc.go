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
// This is the layout of concurrency.Mutex and `etcdctl lock` (and of
// concurrency.Election and `etcdctl elect`, see Leader election), so a
// Locker, a Mutex and etcdctl on the same name exclude each other and queue
// behind each other.
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
// dlock.Acquire and dlock.Do with a Locker wait in the lock's queue, as
// concurrency.Mutex does (see Locker.NotifyRelease): waiters are served in
// the order they queued, without polling, and a crashed holder's lease
// expiry wakes the next. A watch that loses its place to a compaction, or
// that went to a member answering nothing, reads the queue again (at the
// latest at the next renewal of the lease). A wait whose lease ran out (a
// process paused past it) queues again with a new lease, within the
// caller's context; a wait that ends deletes its key, again at each
// renewal of the lease if the first try failed. A bare TryAcquire never
// waits: it puts its key only if the queue is empty.
//
// # Leader election
//
// An election of dlock.Lead, Leader, Observe and Campaign on a Locker is
// one of concurrency.Election and `etcdctl elect` on the same name: a
// candidate's key in the name's queue carries its identity
// (dlock.WithIdentity) as its value, as etcdctl's proposal, and the leader
// is the key with the lowest create revision, its term that revision.
// So `etcdctl elect -l NAME` prints a dlock leader's identity, Leader
// (ReadTerm) names an etcdctl leader and its term, and each queues behind
// the other. Two candidates of one Locker may take each other's queued
// key (see Waiting): the one that leads then puts its own identity on it
// first, keeping its revision, as Election.Proclaim does. A candidate
// whose lease is revoked while it waits queues again on a new lease (at
// the next renewal of the old one, within a third of its TTL), and one
// whose lease is revoked while it leads is told at its next extension:
// neither a campaign that waits forever on a key that is gone, nor a
// leader without a key.
//
// # A lease per session
//
// A Locker shares leases between its locks: one lease per lease TTL (the
// lock's TTL rounded up to whole seconds) for all the locks it holds or
// waits for, as a concurrency.Session does for its Mutexes. A lease per
// lock cost one more Raft commit (the grant) on every acquisition: with a
// shared lease, a cycle is one commit to take the lock and one to release
// it, as for a Mutex on a long-lived session. Only a second acquisition of
// a name the Locker already holds or waits for takes another lease (the
// key is the name and the lease id, so one lease has one key per name);
// such leases are shared too.
//
// What sharing means for a lock:
//
//   - Its token is the lease id in hex, a dash and its key's create
//     revision, so each lock has its own; ReleaseToken and ExtendToken need
//     only the name and the token.
//   - Its validity is ttl from the request that created its key (or found
//     it first in the queue), but never past the time the lease is known to
//     live (the send time of its last grant or keep-alive plus the TTL the
//     cluster answered with), less the drift margin. A lease with less than
//     half of ttl known to be left is renewed before a lock is taken on it,
//     so a new lock is valid for at least half of its TTL.
//   - Release deletes its key only, if it is still this lock's (its create
//     revision): one transaction. The lease lives on for the session's other
//     locks.
//   - Extend renews the lease, and so extends every lock of the session on
//     it, then checks that the key is still this lock's. An etcd lease
//     keeps the TTL it was granted with: an Extend (or ExtendToken) with a
//     longer TTL grants a lease of that TTL for the lock alone and moves the
//     key under it, in a transaction that keeps the key's create revision,
//     so the fence, the token and the lock's place in the queue do not
//     change (concurrency.Mutex and `etcdctl lock` see the same key). The
//     lock then lives by that lease: later extensions renew it, and Release
//     and Close revoke it.
//   - A lock that is neither extended nor released still ends at its TTL,
//     as on the other backends: every renewal of the lease deletes the key
//     of a lock whose validity has ended (if its create revision is still
//     the lock's), and a lease no one renews lapses with it. Such a lock is
//     freed within one lease TTL after its validity ends, when its handle
//     already counts it lost; from then on its Extend is refused. Only
//     the Locker that took a lock knows its validity: while that Locker
//     lives, an ExtendToken from another process does not keep the lock
//     past the validity its own handle knows (extend through the handle,
//     or release it and let the other process take the lock).
//   - When the lease is lost (it expired, a keep-alive found it gone, or
//     another client revoked it), every lock on it is lost, and each handle
//     says so as soon as the Locker learns it (at the first renewal that
//     finds the lease gone, whichever lock or wait sent it): Held reports
//     false, Extend fails with dlock.ErrLockLost, and Do ends fn's context.
//     The Locker takes later locks on a new lease.
//
// A wait keeps its lease alive. When no lock uses a lease any more, no one
// keeps it alive: it lapses at the end of its TTL, and is reused by the
// next acquisition while it lives (a lapsed lease holds no key, so it costs
// the cluster nothing and the Locker no goroutine). Close revokes the
// leases at once.
//
// etcd leases count whole seconds, and a cluster raises a lease below its
// minimum TTL (1.5 election timeouts) to that minimum; the validity never
// counts on more than the cluster answered with.
//
// A renewal, and the read that checks the key is still the lock's, is sent
// in attempts bounded to a sixteenth of the lease at first (growing to a
// quarter after each one that gets no answer), each to the next member the
// client picks: a member that is frozen or cut off silently costs one
// attempt, not the lock.
//
// # Semaphores
//
// Locker.Semaphore (which dlock.Semaphore returns for an etcd Locker)
// grants one of N permits of a name as a lock on one of its slots: a key
// in the queue prefix+"{name}#"+slot+"/", named by the session's lease, as
// the lock on the slot's key ("{vendor-api}#2", see dlock.Semaphore) would be.
// Its fence is the key's create revision. An attempt reads every slot key
// of the name in one range request, and puts its key on the lowest free
// slot in a transaction made only if no slot key changed since that read
// (another grant, a new limit): two round trips, and a new read when it
// loses the race (up to five times).
// The limit lives in the value of the permits' keys ({"limit":5}, before
// the holder record of WithHolderInfo), so it lasts exactly as long as a
// permit: when the last key is deleted or its lease runs out, the record
// is gone with it. A grant counts the permits of every slot, so that after
// SetLimit shrank the limit (it rewrites the values in one transaction,
// keeping the keys' leases and revisions) no permit is granted until fewer
// than the new limit are held.
//
// A semaphore's wait (dlock.Acquire) watches its slot keys from before its
// first attempt, and tries again at each deletion: a release, or a dead
// holder's lease running out. The woken waiters race for the free slot;
// unlike a lock's, a semaphore's waiters are not served in queue order.
//
// # Errors
//
// Every error matches exactly one of dlock's sentinels. A lease that expired
// or was revoked makes Extend fail with dlock.ErrLockLost once the Locker
// knows (dlock.ErrNotHeld when it is the one that finds out) and Release
// with dlock.ErrNotHeld, and dlock.Do cancels fn's context with
// dlock.ErrLockLost; an unreachable
// cluster gives dlock.ErrUnavailable with a *dlock.NodeError naming the
// endpoints. A cluster that refuses for a reason retrying cannot change
// (auth is on and the client has no user, a user without permission on
// the lock's keys, a full space quota) gives dlock.ErrMisconfigured with
// its reason, which Acquire and Do return at once. (A wrong password fails
// earlier, in clientv3.New.) Exclusion is still lease-based: see package
// dlock's "What a lock can and cannot guarantee".
package etcdlock
