// Package pglock implements dlock's locks with PostgreSQL advisory locks,
// through pgx v5: session-level locks behind the common dlock.Locker API
// (TryAcquire, with dlock.Acquire and dlock.Do, fences), transaction-level
// locks for work inside a transaction of yours (TryLockTx, LockTx;
// TryLockSQLTx, LockSQLTx on database/sql). For a job queue, where row
// locks do the work without any advisory lock or fence, see package
// github.com/dlock-go/dlock/pgqueue.
//
// When to choose PostgreSQL over Redis is in package dlock's "Which
// backend"; with either, when a double run would corrupt data, pass the
// lock's fence to the resource (package fence/pgfence for tables in
// PostgreSQL).
//
// # What a session lock guarantees, and what it does not
//
// A Locker takes pg_try_advisory_lock on a connection of your pgxpool.Pool
// that it pins for the life of the lock (no other user of the pool gets
// it meanwhile). PostgreSQL holds the lock exactly as long as that session
// lives. So:
//
//   - No lease, by default. A paused holder (GC, SIGSTOP, a suspended VM)
//     keeps the lock however long the pause: no double grant, but no
//     progress either. WithSessionLease makes it a lease the server ends.
//   - A session that ends releases the lock at once: pg_terminate_backend,
//     a server restart, idle_session_timeout, a failover. The holder learns
//     only when it next talks on that connection; Do does that periodically
//     (see TTL) and cancels its function's context with dlock.ErrLockLost.
//   - A statement on the lock's connection interrupted by its context's
//     deadline ends the session too (pgx closes the connection, and the
//     server frees the lock when it sees the close). So an Extend that
//     times out reports dlock.ErrLockLost, a Release that times out
//     dlock.ErrNotHeld: nothing is left to retry. Give them deadlines long
//     enough for a slow server.
//   - A silent network partition keeps the lock held on the server until
//     it notices the dead connection (tcp_keepalives_idle +
//     tcp_keepalives_interval × tcp_keepalives_count, or tcp_user_timeout;
//     hours by default; never behind a proxy that keeps its side open). The
//     holder's handle expires within its ttl either way. With
//     WithSessionLease the server frees the lock after ttl + margin;
//     without it, keep the ttl below the server's keepalive detection, so
//     that the holder is told before anyone else can get the lock.
//   - Writes on other connections are not atomic with the lock: a holder
//     whose session was killed can still write through another connection
//     before it notices. Fence those writes (fence/pgfence), or make them in
//     a transaction holding a transaction-level lock (TryLockTx), where lock
//     and writes commit or vanish together.
//   - Advisory locks are not replicated: a standby knows nothing of the
//     primary's, and a promoted standby starts with none. pglock refuses to
//     lock on a standby (ErrReadOnly). Transaction-mode poolers
//     (pgbouncer's pool_mode=transaction) break session locks; Extend
//     notices a changed backend (ErrSessionChanged) but cannot prevent it.
//
// # TTL
//
// The server does not expire these locks: the ttl passed to TryAcquire,
// dlock.Acquire and dlock.Do is how long the handle trusts the lock without
// a successful health check, from when its acquisition (or last Extend)
// was sent. Lock.Extend is the health check: the connection is alive, its
// backend is the one that took the lock, pg_locks shows the lock granted
// to it. Do calls it when WithExtendThreshold of the validity is left
// (half by default), so a killed session is noticed within about ttl/2,
// and within ttl at most. With WithSessionLease the ttl, plus the margin,
// is also how long the server lets a silent holder keep the lock.
//
// # Keys
//
// Advisory locks are named by one bigint or by two int4. A lock name
// (after WithPrefix's prefix) maps to a bigint with HashKey, which SQL
// computes too, so psql or another language takes the same lock. Int64Key
// and KeyPair name numbered locks directly (ForKey makes a Locker of one;
// WithKeyFunc maps names to them); the pair form is a key space of its
// own. pglock reserves the bigint key -3089797466993508641 for its
// waiters: do not lock it (held exclusively, it makes waiters poll; in
// share mode, every release sends a NOTIFY).
//
// # Fences
//
// Every acquisition returns a fence: the next value of the sequence
// dlock_fence, drawn in the statement that takes the lock, only if it was
// granted. One sequence serves every key, so a later holder of a key gets
// a larger fence than every earlier holder of it (each draws while it
// holds the lock); one key's numbers have gaps. pglock never creates
// schema objects on its own: run Migrate once (several processes may run
// it at once), or MigrateSQL; without them acquisitions fail with
// ErrNotMigrated. setval, ALTER SEQUENCE ... RESTART and restoring an old
// backup move fences back; guards then refuse the repeated fences (safe,
// but the holders cannot write until the sequence passes the old values).
//
// A fence returned by TryAcquire is as durable as a committed transaction:
// the acquiring statement makes its commit flush the fence, writing, when
// the WAL is behind, a logical message with the prefix "dlock" that
// logical decoding shows (docs/fences.md, "PostgreSQL", says why nextval
// alone does not do it). It survives a server crash with fsync on and
// synchronous_commit not off; with synchronous_commit = off the last
// moments of fences can be lost in a crash, as any committed data can, and
// with fsync = off nothing survives an operating-system crash. A failover
// to an asynchronous standby can lose the latest fences as it loses the
// latest commits; a synchronous standby has every fence.
//
// Clients in other languages take the same locks with the same fences with
//
//	SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('dlock_fence') END
//
// and, before using the fence outside the database, make sure the WAL is
// flushed as above (or simply write anything in the same transaction with
// synchronous_commit on).
//
// # Transaction locks
//
// TryLockTx and LockTx (pgx.Tx), TryLockSQLTx and LockSQLTx (the *sql.Tx
// of database/sql, sqlx, GORM, ent and bun) take a transaction-level lock
// and draw a fence from the same sequence in the same statement. The lock
// ends with the transaction, commit or rollback, and cannot end earlier.
// A rollback does not give the number back, so no fence is handed out
// twice; it is on disk once the transaction has committed (a crash
// before can bring it back, as everything else the transaction did).
//
// Use them in READ COMMITTED transactions (PostgreSQL's default), whose
// statements after LockTx see the previous holder's writes. A REPEATABLE
// READ or SERIALIZABLE transaction reads from a snapshot taken by its
// first statement, which the lock cannot come before: what the previous
// holder committed meanwhile is invisible. An UPDATE of a row it changed
// then fails with a serialization error (40001); a decision made on rows
// only read is silently stale. To work in such a snapshot under a lock,
// take a session lock (Locker) and begin the transaction once it is
// granted.
//
// # Waiting
//
// A Locker with waiters (dlock.Acquire, dlock.Do) keeps one connection,
// opened outside the pool (with its ConnConfig and its BeforeConnect and
// AfterConnect hooks) so that it never takes a connection an attempt
// needs, that LISTENs on the channel dlock_release and holds the reserved
// key in share mode. A release sends NOTIFY dlock_release only when it
// cannot take that key exclusively, that is when some Locker on the
// database has a waiter: an uncontended release sends nothing, and a
// waiter retries as soon as the holder lets go (WithReleaseNotify; Close
// stops the listener). A lock freed by a dying session sends nothing and
// is found by the next poll.
//
// # Connections
//
// Each held lock pins one connection of the pool, and each attempt takes
// one for a round trip; a Locker's waiters share one more, outside the
// pool (count it in max_connections). Size the pool for the locks held at
// once plus one (a pool of its own keeps held locks from starving the
// application); nested locks work on a pool of n+1 for n locks held. When
// this Locker's locks pin every connection, TryAcquire, dlock.Acquire and
// dlock.Do fail at once with ErrPoolExhausted instead of waiting for a
// connection that only a release can free (for nested locks, never); so
// does a wait whose later attempt finds them all pinned. Lockers sharing a
// pool count only their own locks: give each pool one Locker. A pool's
// Close waits for pinned connections: release locks first. The acquiring
// and releasing statements go through QueryRow like any query, in the
// pool's QueryExecMode (with pgx's default, prepared once per connection).
//
// # Semaphores
//
// Locker.Semaphore (which dlock.Semaphore returns for a pglock Locker)
// grants a permit as the session lock on one of its slots, named and
// mapped as TryAcquire's names are: a permit is exactly a lock, with a
// fence, a pinned connection and the same loss when its session ends. The
// limit is kept in the table dlock_semaphore, a row per name that stays
// after the permits (delete unused names' rows at will); a grant is one
// transaction of about five round trips that locks the row, so a client
// stopped in one holds the name's other grants up for up to 5 seconds
// (docs/semaphores.md).
//
// # Inspection and leader election
//
// Locker.Inspect lists the advisory locks held in the database, by any
// session, and a permit's Limit. The server knows a lock only by its key:
// WithHolderInfo makes a Locker publish each held lock's name, so that
// other Lockers and `dlock inspect` list it by name. dlock.Lead, Leader,
// Observe and Campaign need no schema beyond the fence sequence: a
// leader's grant publishes its term and identity in its session's
// application_name (see ReadTerm and docs/election.md). A pinned
// connection is never recycled by the pool, and a session ended under a
// leader is a lost lock, as above.
//
// # Errors
//
// Errors match dlock's sentinels (see package dlock). dlock.ErrMisconfigured
// is the server's refusal that retrying cannot change: failed
// authentication (SQLSTATE class 28), a missing privilege (42501, such as
// USAGE on the fence sequence, or CREATE for Migrate), database (3D000),
// schema (3F000) or fence sequence (42P01), a read-only session (25006).
// Where PostgreSQL said more, one of ErrNotMigrated, ErrReadOnly,
// ErrDeadlock, ErrOutOfLocks, ErrPoolExhausted or ErrSessionChanged comes
// with it. Server errors are wrapped in a *dlock.NodeError carrying the
// *pgconn.PgError. Messages are one line.
package pglock
