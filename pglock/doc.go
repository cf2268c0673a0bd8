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
// A Locker takes pg_try_advisory_lock on a connection it takes from your
// pgxpool.Pool and pins for the life of the lock: no other user of the pool
// gets that connection until the lock is released. PostgreSQL holds the
// lock for exactly as long as that session lives. So:
//
//   - No lease, by default. The server never expires the lock. A holder
//     that is paused (GC, SIGSTOP, a suspended VM) keeps it, however long
//     the pause; nobody else gets it meanwhile, so there is no double
//     grant, but there is no progress either. WithSessionLease makes it a
//     lease that the server ends.
//   - A session that ends releases the lock at once: pg_terminate_backend,
//     a server restart, idle_session_timeout, a failover. The holder learns
//     only when it next talks on that connection. Do does that
//     periodically (see "TTL" below) and cancels its function's context
//     with dlock.ErrLockLost.
//   - A statement on the lock's connection that is interrupted by its
//     context's deadline ends the session too: pgx closes the connection,
//     and the server frees the lock as soon as it sees the close. So an
//     Extend that times out reports dlock.ErrLockLost ("the session
//     ended"), and a Release that times out dlock.ErrNotHeld: there is
//     nothing left to retry. Give them deadlines long enough for a slow
//     server.
//   - A silent network partition keeps the lock held on the server until
//     the server notices the dead connection (tcp_keepalives_idle +
//     tcp_keepalives_interval × tcp_keepalives_count, or tcp_user_timeout;
//     the defaults take hours; behind a proxy that keeps its own side of
//     the connection open, never). The holder's handle expires within its
//     ttl either way, since its health check cannot complete. With
//     WithSessionLease the server frees the lock after ttl + margin; without
//     it, keep the ttl below the server's keepalive detection, so that the
//     holder is told before anyone else can get the lock.
//   - The lock does not make writes on other connections atomic with it:
//     a holder whose session was killed can still write through another
//     connection before it notices. Fence those writes (package
//     fence/pgfence), or do them in a transaction that holds a
//     transaction-level lock (TryLockTx), where lock and writes commit or
//     vanish together.
//   - Advisory locks are not replicated: a hot standby knows nothing of the
//     primary's, and a promoted standby starts with none. pglock refuses to
//     lock on a standby (ErrReadOnly). Transaction-mode poolers
//     (pgbouncer's pool_mode=transaction) break session locks; Extend
//     notices a changed backend (ErrSessionChanged) but cannot prevent it.
//
// # TTL
//
// The server does not expire these locks: the ttl passed to TryAcquire,
// dlock.Acquire and dlock.Do is how long the handle trusts the lock without
// a successful health check. A Lock is valid until ttl after its
// acquisition (or last Extend) was sent. Lock.Extend is the health check
// (the connection is alive, its backend is the one that took the lock,
// pg_locks shows the lock granted to it). Do calls it when
// WithExtendThreshold of the validity is left (half the ttl by default), so
// a killed session is noticed within about ttl/2, and within ttl at most:
// the ttl is the one knob for how quickly a lost lock is noticed. With
// WithSessionLease it is also, plus the margin, how long the server lets a
// silent holder keep the lock.
//
// # Keys
//
// PostgreSQL's advisory locks are named by one bigint or by two int4. A
// lock name (after WithPrefix's prefix, if any) maps to a bigint with
// HashKey, which SQL computes too, so a psql session or a program in
// another language takes the same lock. Int64Key and KeyPair name
// numbered locks directly (ForKey makes a Locker of one), and WithKeyFunc
// maps names to them; the pair form is a key space of its own. pglock
// itself uses one bigint key, -3089797466993508641 (Int64Key), for its
// waiters; do not lock it (held exclusively, it makes waiters poll; in
// share mode, every release sends a NOTIFY).
//
// # Fences
//
// Every acquisition returns a fence: the next value of the sequence
// dlock_fence, drawn in the statement that takes the lock, only if it was
// granted (CASE WHEN pg_try_advisory_lock(...) THEN nextval(...)). One
// sequence serves every key, so a later holder of a key gets a larger fence
// than every earlier holder of it (each draws while it holds the lock); the
// numbers of one key have gaps (other keys' grants, failed statements).
// pglock never creates schema objects on its own: run Migrate once (several
// processes may run it at the same time), or MigrateSQL; without them
// acquisitions fail with ErrNotMigrated (the table dlock_semaphore is for
// semaphores only). setval, ALTER SEQUENCE ... RESTART and restoring an old
// backup move fences back; guards then refuse the repeated fences (safe,
// but the holders cannot write until the sequence passes the old values).
//
// A fence returned by TryAcquire is as durable as a committed transaction
// (nextval alone does not ensure it; docs/fences.md, "PostgreSQL", says why
// and how the acquiring statement makes its commit flush, writing, when the
// WAL is behind, a logical message with the prefix "dlock" that your
// database's logical decoding shows). It survives a crash of the server
// with fsync on and synchronous_commit not off; with synchronous_commit =
// off the last moments of fences can be lost in a crash, as can any
// committed data, and with fsync = off nothing survives an operating-system
// crash. A failover to an asynchronous standby can lose the latest fences
// as it loses the latest commits; with synchronous replication the standby
// has every fence.
//
// Clients in other languages can take the same locks with the same fences:
//
//	SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('dlock_fence') END
//
// and, before using the fence outside the database, make sure the WAL is
// flushed as above (or simply write anything in the same transaction with
// synchronous_commit on).
//
// # Transaction locks
//
// TryLockTx and LockTx take pg_try_advisory_xact_lock / pg_advisory_xact_lock
// inside your pgx.Tx, TryLockSQLTx and LockSQLTx inside a database/sql
// *sql.Tx (the one sqlx, GORM, ent and bun hand out), and draw a fence from
// the same sequence in the same statement. The lock ends with the
// transaction, commit or rollback, and cannot end earlier. A rollback does
// not give the number back, so no fence is handed out twice; it is on disk
// once the transaction has committed (a crash before that can bring it
// back, like everything else the transaction did).
//
// Use transaction locks in READ COMMITTED transactions (PostgreSQL's
// default), where every statement reads what was committed before it
// began, so the statements after LockTx see the previous holder's writes.
// A REPEATABLE READ or SERIALIZABLE transaction reads from one snapshot,
// taken by its first statement, which the lock cannot come before: what
// the previous holder committed while this one waited is invisible to it.
// An UPDATE of a row the previous holder changed then fails with a
// serialization error (40001); a decision made on rows only read is
// silently stale. To work in such a snapshot under a lock, take a session
// lock (Locker) and begin the transaction once it is granted.
//
// # Waiting
//
// A Locker with waiters (dlock.Acquire, dlock.Do) keeps one connection that
// LISTENs on the channel dlock_release and holds the reserved advisory key
// (see Keys) in share mode, opened outside the pool (with the pool's
// ConnConfig and its BeforeConnect and AfterConnect hooks) so that it never
// takes a connection a lock attempt needs. A release sends NOTIFY
// dlock_release only when it cannot take that key exclusively, that is when
// some Locker on the database has a waiter (WithReleaseNotify; Close stops
// the listener): an uncontended release sends nothing, and a waiter retries
// as soon as the holder lets go. A lock freed by a dying session sends
// nothing and is found by the next poll.
//
// # Connections
//
// Each held lock pins one connection of the pool, and each attempt takes
// one for a round trip; a Locker's waiters share one more, made outside
// the pool (count it in max_connections). Size the pool for the locks held
// at once plus one for attempts (a pool of its own keeps held locks from
// starving the application); so nested locks work on a pool of n+1 for n
// locks held. When this Locker's locks pin every connection, TryAcquire,
// dlock.Acquire and dlock.Do fail at once with ErrPoolExhausted ("2 held
// locks pin all 2 connections") instead of waiting for a connection that
// only a release can free, which for nested locks would never come; so
// does a wait whose attempt finds them all pinned later. Lockers sharing a
// pool count only their own locks: give each pool one Locker. A pool's
// Close waits for pinned connections: release locks first.
//
// With a Tracer, or a QueryExecMode other than pgx's default, the acquiring
// and releasing statements go through QueryRow like any query (otherwise
// they are prepared once per connection and encoded by hand).
//
// # Semaphores
//
// Locker.Semaphore (which dlock.Semaphore returns for a pglock Locker)
// grants one of N permits of a name as the session lock on one of its
// slots ("{vendor-api}#2", see dlock.Semaphore), mapped as TryAcquire maps
// names: a permit is exactly the lock on that name, with a fence, a pinned
// connection and the same loss when its session ends. The limit is kept in
// the table dlock_semaphore, one row per semaphore; a grant is one
// transaction of about five round trips that locks the row, so a client
// stopped in the middle of one holds the name's other grants up until the
// server ends its idle transaction (5 seconds). The row stays after the
// permits, a few dozen bytes per name ever used; delete the rows of names
// no longer used at will. How a permit is granted and woken:
// docs/semaphores.md.
//
// # Inspection
//
// Locker.Inspect lists the advisory locks held in the database, by any
// session, and a permit's Limit. The server knows a lock only by its key,
// a hash of the name: WithHolderInfo makes a Locker publish each held
// lock's name, so that other Lockers and `dlock inspect` list it by name.
//
// # Leader election
//
// dlock.Lead, Leader, Observe and Campaign work on a Locker with no schema
// beyond the fence sequence: a leader's grant publishes its term and
// identity in its session's application_name (see ReadTerm). A pinned
// connection is never recycled by the pool, and a session ended under a
// leader is a lost lock as above (docs/election.md).
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
// *pgconn.PgError. Messages are one line (pgx's multi-line connection
// errors are joined with "; ").
package pglock
