// Package redisfence implements a fencing guard in Redis: values kept in
// Redis that accept a write only from the newest lock holder, checked and
// applied atomically by one Lua script per operation.
//
// It applies the rule of package fence — a fence greater than the highest
// seen is accepted, an equal fence only from the holder (token) that set
// it, everything else is refused with an error matching fence.ErrStale —
// to a value stored in Redis, so that the check and the write are one
// compare-and-set that no other client can split. Read raises the highest
// fence as well ("register before you read"), so a stale holder's late
// write cannot land between the newest holder's read and its write. See
// package fence for why the protected resource must take part and why both
// rules matter.
//
// # Usage
//
//	guard, err := redisfence.New(rdb) // *redis.Client, *redis.ClusterClient, *redis.Ring
//	...
//	err = dlock.Do(ctx, locker, "lock:account:42", 10*time.Second, func(ctx context.Context) error {
//		lock := dlock.LockFromContext(ctx)
//		balance, _, err := guard.Read(ctx, "account:42", lock.Fence(), lock.Token())
//		if err != nil {
//			return err // fence.ErrStale: a newer holder has been here; stop
//		}
//		return guard.Write(ctx, "account:42", lock.Fence(), lock.Token(), debit(balance))
//	})
//
// # Storage
//
// Each guarded value is a hash at the caller's key with the fields fence
// (the highest fence seen, in decimal), holder (a digest of the token that
// presented it: the token itself proves ownership of the lock and is not
// stored) and value. Fences are compared as decimal strings, so the whole
// uint64 range is exact although Lua's numbers are doubles. Scripts run by
// SHA and fall back to EVAL when the server answers NOSCRIPT. Every
// operation touches one key, so the guard works on a Redis Cluster.
//
// # Guarantees and limits
//
// The guard is as good as the Redis that keeps it. The hash must never
// expire or be evicted (use maxmemory-policy noeviction) and must survive
// restarts (appendonly with appendfsync always if a lost second matters):
// a guard that forgets its highest fence accepts a stale holder again. A
// failover to a replica that had not received the last write has the same
// effect; a guard kept on a single primary without failover is the
// conservative choice.
//
// The guard protects the value stored in it. Registering a fence here does
// not protect a write to another system: between this guard's answer and
// that write a pause can let a newer holder in. To fence a write to a
// database, the database itself must check the fence (package
// fence/pgfence for PostgreSQL).
//
// An operation that fails with dlock.ErrUnavailable (the server could not
// be reached, or the context ended first) may or may not have been
// applied. Retrying a Write with the same fence and token is safe: the
// tie rule accepts the same holder again, and a newer holder's fence
// refuses it.
package redisfence
