// Package dlock implements distributed locks for Go with one API over a
// single Redis node (package redislock), Redlock across independent Redis
// masters (package redlock) and PostgreSQL advisory locks (package pglock).
// Every lock carries a fencing token, and Do keeps a lock alive while your
// function runs and tells the function, through its context, the moment the
// lock may be lost.
//
// This package holds what a user of locks programs against: the Locker
// interface, the Lock handle, waiting (Acquire), auto-extension (Do),
// leader election (Lead, Leader, Observe, Campaign), the errors, events for
// observers (Event) and inspection (Inspector).
// It imports only the standard library. Package driver has what only a
// backend needs, package locktest the conformance suite, and package
// dlocktest an in-memory Locker for the unit tests of code that uses locks.
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
// ownership to the server, a fence, and a validity deadline measured on the
// monotonic clock (ValidUntil; the drift margin is 1% of the TTL + 2 ms).
// Release and Extend act only while the server still holds the token, so a
// holder whose lock expired can never delete or prolong the next holder's
// lock; they report that with ErrNotHeld. A released or lost handle is
// never held again (see Lock). Go's monotonic clock stops while the
// machine sleeps (suspend to RAM or disk), so a holder whose machine slept
// keeps the validity it had; its next extension is refused, and Do then
// cancels. Pauses the clock counts (GC, SIGSTOP) are caught when the
// process runs again.
//
// # Waiting and Do
//
// TryAcquire (on every backend) makes one attempt. Acquire waits, with
// jitter, through short outages, woken at once by backends that announce
// releases. Do acquires, runs the function, extends the lock in the
// background, cancels the function's context with cause ErrLockLost the
// moment the lock may be lost, and releases when the function returns or
// panics. Their documentation gives the options and the errors.
//
// # Events and inspection
//
// A lock's events go to the observers of the Locker that made it (each of
// them gets every event): each backend's WithObserver and WithLogger
// options attach them, once, to every
// lock the Locker makes and every attempt it is asked for, from a bare
// TryAcquire or within Acquire and Do. A bare TryAcquire reports its
// attempt, then its grant or refusal; within Acquire and Do each attempt
// reports itself (Event.Attempts counts them) and Acquire reports the grant
// or refusal once, when the wait ends, with its Wait. Then come the lock's
// extensions, its loss (and how it was detected) and its release (with the
// hold time). A Locker written elsewhere reports events through package
// driver's Events.
//
// An observer gets the context of the call the event belongs to
// (TryAcquire's, Acquire's, Extend's, Release's; a loss has none of its own
// and gets context.Background()), so that a span can find its parent. It
// runs under none of the library's locks: it may look into the context and
// call the lock's methods. A lock's events reach it one at a time, in the
// order they happened, on the goroutine of the call they belong to (or,
// while an earlier event of the same lock is still being observed, on that
// one's, once it returns). It should return quickly: the call it observes
// waits for it. A Locker without observers (a logger that discards, and no
// WithObserver) builds no event.
//
// The backends' loggers turn events into a Warn record for a lost lock, a
// failed extension or a backend's first refusal that matches
// ErrMisconfigured, and Debug records for the rest; package
// github.com/dlock-go/dlock/dlockotel turns them into OpenTelemetry metrics
// and spans. Every backend is an Inspector: it lists the held locks matching
// a pattern, with their remaining TTL, fence, holder and waiters, as `dlock
// inspect` shows them.
//
// # Leader election
//
// An election is a lock: Lead runs a function while this process leads
// the election name, which it does while it holds the lock on name through
// Do, so the function's context ends the moment the leadership may be
// lost. The term number is the grant's fence, so terms strictly increase
// per name on every backend; pass Term.Fence to the resources the leader
// writes, for the reason given under "What a lock can and cannot
// guarantee".
//
//	err := dlock.Lead(ctx, locker, "scheduler", 15*time.Second, func(ctx context.Context) error {
//		term, _ := dlock.TermFromContext(ctx)
//		return runScheduler(ctx, term.Fence) // every write carries the term
//	})
//
// Leader says who leads now, Observe reports every change it sees, and
// Campaign starts a long-lived Candidate for code that asks "am I the
// leader?" elsewhere (a gocron v2 Elector). Backends read the leader's
// identity and term through package driver's TermReader.
//
// # Semaphores
//
// Semaphore admits up to N holders of one name at once: no more than five
// replicas calling a vendor's API that allows five connections, three
// migrations at a time. A permit is a lock on one of the name's N slots
// (see Semaphore), so Acquire, Do, events, inspection and fences work on
// it as on any lock:
//
//	err := dlock.Do(ctx, dlock.Semaphore(locker, 5), "vendor-api", 30*time.Second, func(ctx context.Context) error {
//		permit := dlock.LockFromContext(ctx) // permit.Key() is "{vendor-api}#3", say
//		return callVendor(ctx, permit.Key(), permit.Fence())
//	})
//
// Slots rather than a count of holders, because a permit must be a lock:
// a lease that ends on the server's clock, a token that only its holder
// can extend or release, a fence. A lock on one of N keys is exactly that,
// with the backend's own expiry, fencing and release, where a count would
// need all three built again beside it; and on Redlock a count kept per
// node admits more than N (three nodes, N = 2: holders granted on {A, B},
// {B, C} and {C, A} each have a majority), while a permit that needs a
// majority on one slot is a Redlock lock like any other, so N holds by
// construction. The slot is also what a fence counts: successive holders
// of a slot get increasing fences, so a guard of package fence keyed by
// the permit's Key refuses a paused holder's late write once its slot went
// to another, while the holders of the other slots write on.
//
// A permit's lease ends on the server's clock, never a client's, and a
// killed holder's permit comes back within its TTL (PostgreSQL: when its
// session ends); an attempt that fails leaves nothing behind, and a
// release wakes a waiter. The limit is agreed on the servers (see
// Semaphore and SetLimit). How each backend grants a free slot, and what
// it costs, is in docs/semaphores.md.
//
// # Errors
//
// Every error matches exactly one sentinel (ErrNotAcquired, ErrNotHeld,
// ErrLockLost, ErrUnavailable, ErrMisconfigured, ErrInvalid: see their
// documentation), and a wait that ended with its context also matches
// ctx.Err(). Which node said what is available through errors.As with
// *NodeError (and the backends' own types).
//
// # What a lock can and cannot guarantee
//
// A lock with a TTL protects against a holder that crashed: the key expires
// and others go on. It does not protect against a holder that is merely
// slow — a GC pause, a stalled network, a suspended VM — because the holder
// cannot tell that its TTL ran out while it was paused, and a pause can fall
// between its last check and its write. Martin Kleppmann ("How to do
// distributed locking", 2016) concludes that a lease lock alone is fine for
// efficiency (avoiding duplicate work) but not for correctness, that Redlock
// in particular relies on bounded network delay, pauses and clock drift, and
// that correctness needs a fencing token: a number that grows with every
// grant and that the protected resource checks, rejecting writes older than
// the newest it has seen.
//
// Salvatore Sanfilippo (antirez, "Is Redlock safe?", 2016) answers that
// Redlock needs clocks that tick at about the same rate, not synchronized
// clocks; that delays during acquisition are caught by measuring the elapsed
// time after the replies arrive; that a pause after acquisition hurts every
// lease-based lock, ZooKeeper's included; and that a resource able to check
// fences could just as well do a compare-and-set on the random token. Both
// are right about something: dlock measures validity on the monotonic clock
// and refuses locks whose validity is spent (antirez's step), and hands out a
// fence with every grant, on every backend, so that a resource that takes
// part (package fence) rejects a stale holder's late write (Kleppmann's
// remedy). If overlap would corrupt data, use the fence.
//
// # Which backend
//
// Use the lock you already have the infrastructure for, and pass the fence
// to the resource when an overlap would corrupt data:
//
//	                        Redis, one node      Redlock (N masters)        PostgreSQL
//	package                 redislock            redlock                    pglock
//	infrastructure          one Redis            N independent Redis        the database you run
//	fault tolerance         none                 a minority of nodes        that of the database
//	lock ends when          the TTL runs out     the TTL runs out           the session (or tx) ends
//	atomic with the data    no                   no                         yes, for a tx lock
//	best fit                efficiency locks     resources across services  work inside one Postgres
//
// One Redis node is simple and fast, but a failover to a replica that had
// not received the key can grant the lock twice; the fence counter can go
// back with it, which the fence guards catch. Redlock survives the loss of
// a minority of independent masters, at the cost of more servers and
// timing assumptions; without fencing it is not safe under process pauses,
// long network delays or clock jumps on a node. A PostgreSQL advisory lock
// needs no extra infrastructure when the work already lives in one
// database, and lives exactly as long as the session that holds it. Use a
// Redis backend when the resource spans services that share no database.
package dlock
