// Package fence implements the resource side of fencing: guards that accept
// an operation only from the newest lock holder, so that a holder whose lock
// expired while it was paused cannot overwrite the work of the holder that
// came after it.
//
// # Why the resource must take part
//
// A lock with a TTL cannot stop a holder that is merely slow. A GC pause, a
// stalled network or a suspended VM can last longer than the lock; another
// client acquires it and writes; then the first holder wakes up and writes
// too, and it has no way to know — a pause can fall between its last check
// and its write. Martin Kleppmann ("How to do distributed locking", 2016)
// gives the remedy: the lock service hands out a number that grows with
// every grant (every dlock backend does: [dlock.Lock.Fence]), the client
// sends it with every write, and the storage remembers the highest number it
// has processed and rejects lower ones. Only the resource sees the writes in
// the order they arrive, so only the resource can do this check.
//
// Salvatore Sanfilippo (antirez, "Is Redlock safe?", 2016) points out that a
// store able to reject old fences can just as well do a compare-and-set on
// the holder's random token, and that the order in which fences were issued
// need not be the order in which writes arrive. Both remarks shape the
// guards here: they are compare-and-set operations that check the fence and
// the holder's token together, atomically with the write, and they decide by
// what the resource has seen, not by what the lock service believes.
//
// # The rule
//
// For each resource a guard keeps the highest fence it has seen and the
// token of the holder that presented it. An operation under (fence, token)
// is accepted if
//
//   - fence is greater than the highest seen, or
//   - fence equals the highest seen and token is the holder that set it.
//
// Everything else is refused with an error matching [ErrStale] (a
// [*StaleError] with the fences). Fence 0 and an empty token are refused
// with an error matching [dlock.ErrInvalid]: no backend issues fence 0, so
// it means the caller forgot to pass one.
//
// The tie rule matters. A plain "fence >= highest" accepts two holders that
// carry the same fence, and after node faults that can happen: a Redis
// failover or a restart without persistence can reset the fence counter, so
// a later grant repeats a fence already in use. The holder that reached the
// resource first keeps it; the other is refused.
//
// # Register before you read
//
// Checking only writes is not enough for read-modify-write. Say A holds
// fence 1 and stalls; B acquires with fence 2, reads the value, and is about
// to write. If A's late write lands between B's read and B's write, the
// guard accepts it (1 is the highest it has seen), and then B's write,
// computed from the value before A's, silently overwrites it: a lost update
// nobody is told about. So reads raise the highest fence too: a holder
// registers its fence before it reads ([Memory.Read] or [Memory.Register]),
// and from then on A's write is refused. A guard that sees B only at write
// time cannot tell.
//
// # Limits
//
// A guard is as durable as the place it keeps the highest fence. [Memory]
// forgets everything when the process exits, which is right only when the
// protected resource lives and dies with that process. Fences are per lock
// key: use one lock key per guarded resource (or per set of resources
// guarded together), because a guard cannot tell a fence of another key
// from a stale one. Guards keep no per-holder history, so a holder refused
// once stays refused; it should stop and let the newer holder work.
//
// Package redisfence keeps guarded values in Redis with the same rule, in
// one Lua script per operation. A PostgreSQL guard lives in package
// fence/pgfence.
package fence
