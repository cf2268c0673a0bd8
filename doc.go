// Package dlock implements distributed locks for Go with one API over a
// single Redis node (package redislock), Redlock across independent Redis
// masters (package redlock) and PostgreSQL advisory locks (package pglock).
// Every lock carries a fencing token, and Do keeps a lock alive while your
// function runs and tells the function, through its context, the moment the
// lock may be lost.
//
// This package holds what code that uses locks programs against, and
// imports only the standard library. Package driver has what only a
// backend needs, package locktest the conformance suite, and package
// dlocktest an in-memory Locker for the unit tests of code that uses
// locks.
//
// # Quick start
//
//	locker, err := redislock.New(redis.NewClient(&redis.Options{
//		Addr:                  "localhost:6379",
//		ContextTimeoutEnabled: true, // let context deadlines bound every call
//	}))
//	if err != nil { ... }
//	err = dlock.Do(ctx, locker, "invoice:4821", 10*time.Second, func(ctx context.Context) error {
//		inv, err := loadInvoice(ctx, "4821")
//		if err != nil {
//			return err
//		}
//		if ctx.Err() != nil { // the lock may be lost: stop before the irreversible step
//			return context.Cause(ctx)
//		}
//		return postToLedger(ctx, inv)
//	})
//
// # The handle
//
// A *Lock has a key, a random token (128 bits from crypto/rand) that proves
// ownership to the server, a fence, and a validity deadline on the
// monotonic clock (ValidUntil; the drift margin is 1% of the TTL + 2 ms).
// Release and Extend act only while the server still holds the token, so a
// holder whose lock expired never deletes or prolongs the next holder's
// lock: they report ErrNotHeld. A released or lost handle is never held
// again. A pause the monotonic clock counts (GC, SIGSTOP) is caught when
// the process runs again; a machine's sleep is not, until its next
// extension is refused (see docs/guarantees.md).
//
// # Events and inspection
//
// A lock's events go to the observers of the Locker that made it (each
// backend's WithObserver and WithLogger options): every attempt, bare or
// within Acquire and Do, the grant or refusal (Acquire reports it once,
// when the wait ends), then the lock's extensions, its loss (even one
// the backend found before the grant was reported) and its release (see
// Event). driver.NewEvents says what the loggers write, and
// package github.com/dlock-go/dlock/dlockotel turns events into
// OpenTelemetry metrics and spans.
//
// An observer gets the context of the event's call (a loss gets
// context.Background()), so that a span can find its parent. It runs under
// none of the library's locks: it may look into the context and call the
// lock's methods. A lock's events reach it one at a time, in order, on the
// goroutine of their call (or, while an earlier event of the same lock is
// being observed, on that one's, once it returns). It should return
// quickly: the call it observes waits for it. A Locker without observers
// builds no event.
//
// Every backend is an Inspector: it lists the held locks matching a
// pattern, with their remaining TTL, fence, holder and waiters, as `dlock
// inspect` shows them.
//
// # Leader election
//
// An election is a lock: Lead runs a function while this process holds
// the lock on the election's name through Do, and the term number is the
// grant's fence, so terms strictly increase per name on every backend.
// Leader says who leads now, Observe reports every change it sees, and
// Campaign starts a long-lived Candidate (a gocron v2 Elector). See Lead,
// and docs/election.md for the backends and their hand-off times.
//
// # Semaphores
//
// Semaphore admits up to N holders of one name at once. A permit is a lock
// on one of the name's N slots, so Acquire, Do, events, inspection and
// fences work on it as on any lock, and successive holders of a slot get
// increasing fences. Its lease ends on the server's clock, a killed
// holder's permit comes back within its TTL (PostgreSQL: when its session
// ends), an attempt that fails leaves nothing behind, and a release wakes
// a waiter. The limit is agreed on the servers (see SetLimit).
// docs/semaphores.md says why slots rather than a count and what each
// backend costs.
//
// # Errors
//
// Every error matches exactly one sentinel (see ErrNotAcquired and the
// others); errors.As with *NodeError says which node said what.
//
// # What a lock can and cannot guarantee
//
// A lock with a TTL protects against a holder that crashed, not one that
// is merely slow (a GC pause, a stalled network, a suspended VM): a pause
// can fall between its last check and its write, so a lease alone is for
// efficiency, not correctness. dlock never returns a lock whose validity
// is spent, and every grant on every backend has a fence, which a
// resource that takes part (package fence) uses to reject a stale
// holder's late write: if overlap would corrupt data, use the fence.
// docs/guarantees.md gives the argument and each backend's limits.
//
// # Which backend
//
// Use the lock you already have the infrastructure for; the README's table
// compares the backends (etcd's too): what each survives, what exclusion
// it keeps without a fence, its fences and costs. Only a PostgreSQL
// transaction lock commits atomically with the work's writes (see pglock).
package dlock
