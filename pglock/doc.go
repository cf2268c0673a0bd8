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
// The server does not expire these locks, so the ttl passed to
// TryAcquire, dlock.Acquire and dlock.Do does not reach the server. It is
// how long the handle trusts the lock without a successful health check: a Lock is
// valid until ttl after its acquisition (or last Extend) was sent, and
// Lock.Extend is the health check: it verifies that the pinned connection
// is alive, that its backend is still the one that took the lock, and that
// pg_locks shows the lock granted to it, and then moves the validity to ttl
// from then. Do calls it when WithExtendThreshold of the validity is left
// (half the ttl by default), so a killed session is noticed within about
// ttl/2, and within ttl at most. The ttl is therefore the knob for how
// quickly a lost lock is noticed; there is no other health interval. With
// WithSessionLease it is also, plus the margin, how long the server lets a
// silent holder keep the lock.
//
// # Keys
//
// PostgreSQL's advisory locks are named by one bigint or by two int4. A
// lock name (after WithPrefix's prefix, if any) maps to a bigint with
// HashKey, which SQL computes too, so a psql session or a program in
// another language takes the same lock:
//
//	SELECT pg_advisory_lock(('x' || left(encode(sha256(convert_to('invoice:42', 'UTF8')), 'hex'), 16))::bit(64)::bigint);
//
// Int64Key and KeyPair name numbered locks directly (ForKey makes a Locker
// of one), and WithKeyFunc maps names to them; the pair form is a key
// space of its own. pglock itself uses one bigint key,
// -3089797466993508641 (Int64Key), for its waiters; do not lock it.
//
// # Fences
//
// Every acquisition returns a fence: the next value of the sequence
// dlock_fence, drawn in the same statement that takes the lock and only if
// it was granted (CASE WHEN pg_try_advisory_lock(...) THEN nextval(...)).
// One sequence serves every key, so fences increase across all keys, which
// is more than fencing needs: a later holder of a key gets a larger fence
// than every earlier holder of it, because each draws its number while it
// holds the lock, after the previous holder drew its own. The numbers of
// one key have gaps (the other keys' grants, failed statements). pglock
// never creates schema objects on its own: run Migrate once (several
// processes may run it at the same time), or this SQL (MigrateSQL):
//
//	CREATE SEQUENCE IF NOT EXISTS dlock_fence
//		AS bigint INCREMENT BY 1 MINVALUE 1 NO MAXVALUE START WITH 1 CACHE 1 NO CYCLE;
//	CREATE TABLE IF NOT EXISTS dlock_semaphore (
//		name bytea PRIMARY KEY, permits int NOT NULL, slots int NOT NULL)
//
// Without them acquisitions fail with ErrNotMigrated (the table is for
// semaphores only). Keep CACHE 1 (see MigrateSQL; Migrate checks it).
// setval, ALTER SEQUENCE ... RESTART and restoring an old backup move
// fences back; guards then refuse the repeated fences (safe, but the
// holders cannot write until the sequence passes the old values).
//
// Durability. A fence must not come again after a crash, and nextval alone
// does not ensure it (why, and what the statement does about it, is in
// docs/fences.md, "PostgreSQL"): when the WAL is not yet flushed past the
// fence's record, the acquiring statement writes a small logical message
// with the prefix "dlock" (which the logical decoding of your database
// shows) so that its commit flushes it. In the common case of no other
// writes in flight, nothing is written and nothing waits. A fence returned
// by TryAcquire is then as durable as a committed transaction: it survives
// a crash of the server with fsync on and synchronous_commit not off; with
// synchronous_commit = off the last moments of fences can be lost in a
// crash, as can any committed data, and with fsync = off nothing survives
// an operating-system crash. A failover to an asynchronous standby can
// lose the latest fences as it loses the latest commits; with synchronous
// replication the standby has every fence handed out.
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
// inside your pgx.Tx and draw a fence in the same statement, from the same
// sequence. TryLockSQLTx and LockSQLTx do the same inside a database/sql
// *sql.Tx (with pgx's stdlib driver; the transaction sqlx, GORM, ent and
// bun hand out; session locks need a pgxpool.Pool). The lock ends with the
// transaction, commit or rollback, and cannot end earlier. Sequences are
// not transactional: a rollback does not give the number back, so no
// fence is handed out twice; the fence is on disk once the transaction
// has committed (pglock makes the commit flush when it has to; after a
// crash before that, it can come again, like everything else the
// transaction did).
//
// Use transaction locks in READ COMMITTED transactions (PostgreSQL's
// default), where every statement reads what was committed before it
// began, so the statements after LockTx see the previous holder's writes.
// A REPEATABLE READ or SERIALIZABLE transaction reads from one snapshot,
// taken by its first statement, and an advisory lock cannot come before
// that statement: the snapshot predates the grant, and what the previous
// holder committed while this one waited is invisible to it. An UPDATE of
// a row the previous holder changed then fails with a serialization error
// (40001); a decision made on rows only read is silently stale. To work in
// such a snapshot under a lock, take a session lock (Locker) and begin the
// transaction once it is granted.
//
// # Waiting
//
// A Locker with waiters (dlock.Acquire, dlock.Do) keeps one connection
// that LISTENs on the channel dlock_release (opened outside the pool, with the pool's ConnConfig and its
// BeforeConnect and AfterConnect hooks, so that it never takes a connection
// a lock attempt needs) and holds the reserved advisory key (see Keys) in
// share mode; a release sends NOTIFY dlock_release only when it cannot take
// that key exclusively, that is when some Locker on the database has a
// waiter (WithReleaseNotify; Close stops the listener). So an uncontended
// release sends nothing, and a waiter retries as soon as the holder lets
// go. A lock freed by a dying session sends nothing and is found by the
// next poll.
//
// # Connections
//
// Each held lock pins one connection of the pool, and each attempt takes
// one for a round trip; a Locker's waiters share one more connection, made
// outside the pool, so the server must allow it (max_connections). Size
// the pool for the locks held at once plus one for attempts (a pool of its
// own keeps held locks from starving the application). So nested locks
// work on a pool of n+1 for n locks held: a Locker over two connections
// that holds one lock and waits for another gets it when its holder lets
// go. When this Locker's locks pin every connection, TryAcquire,
// dlock.Acquire and dlock.Do fail at once with ErrPoolExhausted ("2 held
// locks pin all 2 connections") instead of waiting for a connection that
// only a release can free, which for nested locks would never come; so
// does a wait whose attempt finds them all pinned later. Lockers sharing a
// pool count only their own locks: give each pool one Locker. A pool's
// Close waits for pinned connections: release locks first.
//
// With pgx's default query mode (prepared statements) and no tracer, the
// acquiring and releasing statements are prepared once per connection and
// their few values are encoded by hand, past pgx's type mapping; with any
// other QueryExecMode, or a Tracer, they go through QueryRow, so a pool set
// up for a proxy, or traced, sees them as before.
//
// # Semaphores
//
// Locker.Semaphore (which dlock.Semaphore returns for a pglock Locker)
// grants one of N permits of a name as the session lock on one of its
// slots: the slot's key ("{vendor-api}#2", see dlock.Semaphore), mapped as
// TryAcquire maps names (with the prefix, by HashKey or WithKeyFunc), so a
// permit is exactly the lock on that name, with a fence from the same
// sequence, a pinned connection (see Connections) and the same loss when
// its session ends.
//
// The limit is kept in the table dlock_semaphore, one row per semaphore,
// named by the prefix and what its slots' names begin with ("{name}#"):
// the limit, and how many slots may be held (more than the limit while
// holders above a limit that SetLimit shrank finish). A grant
// is one transaction on the connection it pins: it locks the name's row
// (creating it on first use), finds the held slots in pg_locks, and takes
// the lowest free one below the limit with the usual statement; about five
// round trips. Grants of one name are serialized by the row lock: a client
// that stops in the middle of one (paused, cut off) holds the others up
// until the server ends its idle transaction, after 5 seconds. The row is
// void while no permit of the name is held, and the next grant records its
// own limit: the limit lasts as long as the permits. The row itself stays,
// a few dozen bytes per semaphore name ever used, as the fence sequence
// stays; delete the rows of names no longer used at will.
//
// A semaphore's wait is registered on every slot with the release
// listener (see Waiting), so the release of any permit wakes it. Inspect
// gives a permit's Limit when it can name the permit (see Inspection).
//
// # Inspection
//
// Locker.Inspect lists the advisory locks held in the database, by any
// session. The server knows a lock only by its key, a hash of the name:
// WithHolderInfo makes a Locker publish each held lock's name in its
// session's application_name (set and restored in the statements that take
// and release the lock), so that every Locker with the same prefix and key
// function, and `dlock inspect`, lists it by name.
//
// # Leader election
//
// dlock.Lead, Leader, Observe and Campaign work on a Locker with no schema
// beyond the fence sequence: a leader's grant publishes its term and
// identity in its session's application_name (see ReadTerm). A pinned
// connection is never recycled by the pool (MaxConnLifetime applies to
// idle connections), so a leader never loses its lock silently to its own
// pool; a session ended under it is lost as any lock's is (see above),
// and the next candidate may lead before the leader's next check.
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
