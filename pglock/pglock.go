package pglock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// Locker takes session-level advisory locks through a pgxpool.Pool. Every
// held lock pins one connection of the pool until it is released or lost;
// a connection is never shared by two holders (PostgreSQL's session locks
// are reentrant, so a shared connection would let a second holder in).
// A Locker is safe for concurrent use; create one per pool and share it.
type Locker struct {
	pool     *pgxpool.Pool
	node     string // host:port, for dlock.NodeError
	maxConns int32
	keyFunc  func(name string) (Key, error)
	cfg      backend.Config
	notify   bool
	lease    time.Duration // WithSessionLease margin; < 0: off
	holder   bool          // WithHolderInfo
	service  string

	// The statements of a grant that publishes nothing ([0]), and of one
	// that publishes holder info or an identity ([1]).
	stmts [2]*statements

	held     atomic.Int32 // connections pinned by this Locker's locks
	listener *listener
	grants   sync.Map // the locks this Locker holds (*grant keys), for Inspect
}

var _ dlock.Locker = (*Locker)(nil)

// releaseBound bounds an Extend whose ctx has no deadline.
const releaseBound = 5 * time.Second

// Option configures a Locker.
type Option func(*Locker) error

// WithKeyFunc sets how lock names map to advisory keys, for example to put
// names of the form "tenant:42" in the two-int4 key space with KeyPair. An
// error from f is returned, matching dlock.ErrInvalid, before anything is
// sent. The default is HashKey.
func WithKeyFunc(f func(name string) (Key, error)) Option {
	return func(l *Locker) error {
		if f == nil {
			return bridge.Invalidf("nil key function")
		}
		l.keyFunc = f
		return nil
	}
}

// WithPrefix prepends prefix to every lock name before it is mapped to an
// advisory key (WithKeyFunc's function sees prefix+name), so that
// applications sharing a database keep their names apart, e.g. "billing:".
// Handles report the name without the prefix; ForKey's Key is taken as it
// is. The default is no prefix.
func WithPrefix(prefix string) Option {
	return func(l *Locker) error { return l.cfg.SetPrefix(prefix) }
}

// WithReleaseNotify turns wake-on-release on or off (see Waiting in the
// package documentation): a waiter retries within about a round trip of a
// release instead of at its next poll. The default is on.
func WithReleaseNotify(on bool) Option {
	return func(l *Locker) error {
		l.notify = on
		return nil
	}
}

// WithLogger sets where the Locker logs its events (see Events in package
// dlock's documentation) and its release listener's troubles (waiters then
// poll until it is back). The default is slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) error { return l.cfg.SetLogger(logger) }
}

// WithObserver adds an observer of the Locker's attempts and locks (see
// Events in package dlock's documentation). The default is none, beside
// the logger's.
func WithObserver(observe func(ctx context.Context, e dlock.Event)) Option {
	return func(l *Locker) error { return l.cfg.AddObserver(observe) }
}

// WithSessionLease makes the server free a lock whose holder stops checking
// it, as a Redis TTL would: the lock's session gets idle_session_timeout =
// ttl + margin at acquisition and at every Extend (PostgreSQL ends a
// session idle that long, and its locks with it), and its previous value
// back at release. A paused, hung or cut-off holder then blocks others for
// about ttl + margin. Its own validity always ends first, so a holder that
// resumes finds its handle expired before anyone else can have the lock;
// its late writes still need a fence.
//
// A lock held without Do must then be extended within every ttl + margin.
// margin must not be negative; keep it above a round trip and a scheduling
// delay. TryAcquire and Extend reject with dlock.ErrInvalid a ttl whose
// ttl + margin exceeds idle_session_timeout's maximum, 2147483647ms (about
// 24.8 days). Needs PostgreSQL 14 or later. The default is no lease.
func WithSessionLease(margin time.Duration) Option {
	return func(l *Locker) error {
		if margin < 0 {
			return bridge.Invalidf("session lease margin %v: must not be negative", margin)
		}
		if margin > maxSessionLease-time.Millisecond {
			return bridge.Invalidf("session lease margin %v: leaves no room for a ttl below idle_session_timeout's maximum of %dms (about 24.8 days)",
				margin, maxSessionLease.Milliseconds())
		}
		l.lease = margin
		return nil
	}
}

// maxSessionLease is the largest idle_session_timeout PostgreSQL accepts.
const maxSessionLease = math.MaxInt32 * time.Millisecond

// checkTTL rejects a ttl no lock honours, or too long for the lease.
func (l *Locker) checkTTL(ttl time.Duration) error {
	if err := l.cfg.CheckTTL(ttl); err != nil || l.lease < 0 {
		return err
	}
	if ms := bridge.Milliseconds(ttl + l.lease); ms > maxSessionLease.Milliseconds() {
		return bridge.Invalidf("ttl %v + session lease margin %v = %dms: above idle_session_timeout's maximum of %dms (about 24.8 days)",
			ttl, l.lease, ms, maxSessionLease.Milliseconds())
	}
	return nil
}

// leaseMS returns the idle_session_timeout for ttl.
func (l *Locker) leaseMS(ttl time.Duration) string {
	return strconv.FormatInt(bridge.Milliseconds(ttl+l.lease), 10)
}

// New returns a Locker over pool, sending nothing to the server. The fence
// sequence must exist (Migrate) before the first acquisition; size the
// pool as Connections in the package documentation says.
func New(pool *pgxpool.Pool, opts ...Option) (*Locker, error) {
	if pool == nil {
		return nil, bridge.Invalidf("nil pgxpool.Pool")
	}
	cfg := pool.Config()
	cc := cfg.ConnConfig
	l := &Locker{
		pool:     pool,
		node:     nodeName(cc),
		maxConns: cfg.MaxConns,
		keyFunc:  func(name string) (Key, error) { return HashKey(name), nil },
		notify:   true,
		lease:    -1,
		cfg:      backend.New(0, false),
	}
	l.cfg.NoDrift = true // a session lock's validity sets no margin aside
	if err := backend.Apply(l, opts); err != nil {
		return nil, err
	}
	l.listener = &listener{l: l, byKey: map[string][]chan struct{}{}, closed: !l.notify}
	for i, publish := range []bool{false, true} {
		l.stmts[i] = l.buildStatements(l.sessionSettings(publish))
	}
	l.cfg.Done("postgres")
	return l, nil
}

// nodeName names the server of cc in errors: host:port.
func nodeName(cc *pgx.ConnConfig) string {
	return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
}

func errZeroKey() error {
	return bridge.Invalidf("zero Key (build keys with HashKey, Int64Key or KeyPair)")
}

// TryAcquire makes one attempt to take the session-level advisory lock on
// key (prefixed and mapped) and to draw its fence, in one statement on a
// connection it pins for the life of the lock. The lock lasts as long as
// the session; ttl is how long the handle trusts it without a health check
// (see TTL in the package documentation).
//
// It returns an error matching dlock.ErrNotAcquired when another session
// holds the lock, dlock.ErrMisconfigured when the server refused for a
// reason retrying cannot change, dlock.ErrUnavailable when it could not be
// reached or answered with another error, each with pglock's own error
// where there is one (see Errors in the package documentation), and
// dlock.ErrInvalid for bad arguments. A wait for a free pool connection
// ends with ctx, matching dlock.ErrNotAcquired and ctx.Err().
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return l.acquire(ctx, key, nil, ttl)
}

// acquire is TryAcquire of name on k, or on the key name maps to when k
// is nil.
func (l *Locker) acquire(ctx context.Context, name string, k *Key, ttl time.Duration) (*dlock.Lock, error) {
	return l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) {
		key, err := l.resolve(ctx, name, k, l.checkTTL(ttl))
		if err != nil {
			return nil, err
		}
		id, err := identity(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := l.pin(ctx, name)
		if err != nil {
			return nil, err
		}
		g, validUntil, err := l.grantOn(ctx, conn, name, key, id, ttl)
		if err != nil {
			return nil, err
		}
		return driver.NewLock(name, bridge.NewToken(), g.fence, validUntil, g), nil
	})
}

// resolve refuses, in this order, ForKey's zero Key, a bad ctx or name,
// and argErr (the caller's check of its other arguments, as TryAcquire's
// ttl), then returns k, or when k is nil the key name maps to: the key
// function runs only for good arguments.
func (l *Locker) resolve(ctx context.Context, name string, k *Key, argErr error) (Key, error) {
	if k != nil && !k.valid() {
		return Key{}, errZeroKey()
	}
	if err := cmp.Or(l.cfg.CheckRead(ctx, name), argErr); err != nil {
		return Key{}, err
	}
	if k != nil {
		return *k, nil
	}
	return l.mapKey(name)
}

// mapKey returns the advisory key of name: WithPrefix's prefix and name,
// mapped by the key function.
func (l *Locker) mapKey(name string) (Key, error) {
	k, err := l.keyFunc(l.cfg.Prefix + name)
	if err != nil {
		return Key{}, fmt.Errorf("dlock: key %q: %w: key function: %w", name, dlock.ErrInvalid, nodeerr.OneLine(err))
	}
	if !k.valid() {
		return Key{}, bridge.Invalidf("key function returned the zero Key for %q", name)
	}
	return k, nil
}

// ForKey returns a Locker that takes the lock on k, a Key chosen by the
// caller such as a KeyPair, as TryAcquire does for a name: the key its
// TryAcquire is given only names the lock (the handle's Key, the events'
// key), and WithPrefix and WithKeyFunc do not apply. Wait for it with
// dlock.Acquire and dlock.Do like any Locker, woken by release
// notifications:
//
//	err := dlock.Do(ctx, locker.ForKey(pglock.KeyPair(7, 1001)), "tenant 7, job 1001", ttl, fn)
//
// Its TryAcquire rejects the zero Key with dlock.ErrInvalid.
func (l *Locker) ForKey(k Key) dlock.Locker { return keyLocker{l, k} }

// keyLocker is the Locker of ForKey.
type keyLocker struct {
	l *Locker
	k Key
}

func (kl keyLocker) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	return kl.l.acquire(ctx, name, &kl.k, ttl)
}

// NotifyRelease implements driver.ReleaseNotifier (see Locker.NotifyRelease).
func (kl keyLocker) NotifyRelease(ctx context.Context, _ string) (<-chan struct{}, func()) {
	return kl.l.notifyKeys(kl.k)
}

// grantOn makes one attempt to take the session lock on k on conn,
// publishing id (see identity), and keeps conn pinned when granted, gives
// it back when k is busy, and discards it on an error.
func (l *Locker) grantOn(ctx context.Context, conn *pgxpool.Conn, name string, k Key, id string, ttl time.Duration) (*grant, time.Time, error) {
	g := &grant{l: l, key: k, name: name, identity: id}
	args := g.key.args(g.args[:0])
	if l.lease >= 0 {
		args = append(args, l.leaseMS(ttl))
	}
	args = l.publish(g, args)
	dest := append(g.dest[:0], &g.drawn, &g.pid)
	for i := range g.st.settings {
		dest = append(dest, &g.set[i], &g.prev[i])
	}

	start := time.Now()
	if err := conn.QueryRow(ctx, g.st.acquire[k.form()], args...).Scan(dest...); err != nil {
		// The lock may have been granted before the error: closing the
		// session is the one sure way to give it back.
		discard(conn)
		return nil, time.Time{}, acquireErr(ctx, name, l.node, err)
	}
	if !g.drawn.Valid {
		conn.Release()
		l.busy(k)
		return nil, time.Time{}, fmt.Errorf("dlock: acquire %q: %w (held by another session)", name, dlock.ErrNotAcquired)
	}
	if elapsed := time.Since(start); elapsed >= ttl {
		discard(conn)
		return nil, time.Time{}, fmt.Errorf("dlock: acquire %q: %w (the acquisition took %v, longer than the ttl %v)", name, dlock.ErrNotAcquired, elapsed, ttl)
	}
	l.held.Add(1)
	g.conn = conn
	g.since, g.fence = time.Now(), uint64(g.drawn.Int64)
	l.grants.Store(g, nil)
	return g, start.Add(ttl), nil
}

// pin takes a connection from the pool for an attempt, refusing at once,
// for waits too, when this Locker's locks pin every connection: waiting
// cannot be trusted to change that (they may be the caller's, nested).
func (l *Locker) pin(ctx context.Context, name string) (*pgxpool.Conn, error) {
	if n := l.held.Load(); n >= l.maxConns {
		return nil, &bridge.Final{Err: fmt.Errorf("dlock: acquire %q: %w: %w (%d held locks pin all %d connections; raise MaxConns or release locks)",
			name, dlock.ErrUnavailable, ErrPoolExhausted, n, l.maxConns)}
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		detail := fmt.Errorf("no pool connection (%d of %d pinned by this Locker's locks, %d in use in all): %w",
			l.held.Load(), l.maxConns, l.pool.Stat().AcquiredConns(), err)
		return nil, acquireErr(ctx, name, l.node, detail)
	}
	return conn, nil
}

// discard closes a connection whose session may hold a lock, so the server
// frees it, and takes it out of the pool.
func discard(conn *pgxpool.Conn) {
	closeConn(conn.Hijack())
}

// grant is one held session lock: the pinned connection and what the
// session must still show.
type grant struct {
	l     *Locker
	key   Key
	name  string
	st    *statements // the statements it was taken with, and is released with
	pid   int32       // pg_backend_pid() at acquisition
	since time.Time   // since, fence and identity (driver.Identity's): for Inspect and ReadTerm
	fence uint64
	// identity and prev, the session settings' values before the grant,
	// restored at release.
	identity string
	prev     [2]string

	mu          sync.Mutex // a pgx connection serves one statement at a time
	conn        *pgxpool.Conn
	ended       error // once conn is given up: why, without a sentinel
	sessionGone bool  // the session ended: a lost lock for Extend

	// The statements' arguments and results, kept here so that passing
	// them allocates nothing. drawn is the fence, NULL when not granted.
	args    [5]any
	dest    [6]any
	drawn   pgtype.Int8
	set     [2]bool
	outcome int32
}

// lockID is how pg_locks shows the grant.
func (g *grant) lockID() lockID {
	c, o, s := g.key.lockID()
	return lockID{c, o, int32(s), g.pid}
}

// Extend checks that the lock's session is alive, is the one that took the
// lock, and still holds it; the new validity runs ttl from when the check
// was sent. It returns an error matching dlock.ErrLockLost when the session
// is gone (its connection closed, the backend terminated or replaced), and
// dlock.ErrNotHeld when the live session no longer holds the lock.
//
// A cancellation of ctx does not interrupt a check in flight: pgx would
// close the connection, ending the lock (dlock.Do cancels its last check
// just before releasing). ctx's deadline does, and then the lock is lost;
// without one the check gives up after releaseBound.
func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if err := g.l.checkTTL(ttl); err != nil {
		return time.Time{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn == nil {
		return time.Time{}, g.endedErr(true)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(releaseBound)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	c, o, sub := g.key.lockID()
	start := time.Now()
	var pid int32
	var held bool
	sql, args, dest := extendSQL, []any{c, o, sub}, []any{&pid, &held}
	if g.l.lease >= 0 {
		sql += `, set_config('idle_session_timeout', $4::text, false) IS NOT NULL`
		args, dest = append(args, g.l.leaseMS(ttl)), append(dest, new(bool))
	}
	if err := g.conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		return time.Time{}, g.connErr(ctx, err, true)
	}
	switch {
	case pid != g.pid:
		return time.Time{}, g.end(true, true, fmt.Errorf("the session ended: %w (backend pid %d, was %d)", ErrSessionChanged, pid, g.pid))
	case !held:
		return time.Time{}, g.end(false, true, errors.New("the session no longer holds the advisory lock"))
	}
	return start.Add(ttl), nil
}

// extendSQL reads the session's pid and whether it holds the advisory
// lock whose pg_locks id is $1, $2, $3.
const extendSQL = `SELECT pg_backend_pid(), EXISTS (SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND mode = 'ExclusiveLock'
	AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3)`

// Release unlocks on the pinned connection and gives it back to the pool.
// It returns an error matching dlock.ErrNotHeld when the session no longer
// held the lock, or ended (then the server frees the lock with it), and
// dlock.ErrUnavailable when the live session could not unlock, and still
// holds the lock.
func (g *grant) Release(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn == nil {
		return g.endedErr(false)
	}
	// A NOTIFY the statement sends is delivered when its implicit
	// transaction commits, after the unlock.
	args := g.key.args(g.args[:0])
	dest := append(g.dest[:0], &g.outcome)
	for i := range g.st.settings {
		args = append(args, g.prev[i])
		dest = append(dest, &g.set[i]) // free since the grant
	}
	if err := g.conn.QueryRow(ctx, g.st.release[g.key.form()], args...).Scan(dest...); err != nil {
		return g.connErr(ctx, err, false)
	}
	if g.outcome == 0 {
		// Should not happen while the session lives; do not hand a
		// session in an unknown state to the next pool user.
		return g.end(false, false, errors.New("the session did not hold the advisory lock"))
	}
	g.conn.Release()
	g.forget(false, errors.New("released"))
	return nil
}

// connErr classifies an error of a statement on the pinned connection
// (extend says which operation). pgx closes the connection on a network
// error, a timeout or a cancellation mid-statement, and on a FATAL error
// (a terminated backend): the session is over, and the server frees its
// locks once it sees the close. That is a lost lock. A statement error on
// a live session leaves the lock held.
func (g *grant) connErr(ctx context.Context, err error, extend bool) error {
	if !g.conn.Conn().IsClosed() {
		nerr := nodeerr.Error(ctx, g.l.node, err, kind(err), false)
		return fmt.Errorf("%w (the session still holds the lock)", nerr)
	}
	nerr := nodeErr(g.l.node, err)
	if pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return g.end(true, extend, fmt.Errorf("the session ended: pgx closed its connection when the statement was interrupted, which frees the lock: %w", nerr))
	}
	return g.end(true, extend, fmt.Errorf("the session ended: %w", nerr))
}

// end closes the connection of a session that may hold something, so the
// server frees it, and returns endedErr. why says what happened,
// sessionGone whether the session itself is over.
func (g *grant) end(sessionGone, extend bool, why error) error {
	discard(g.conn)
	g.forget(sessionGone, why)
	return g.endedErr(extend)
}

// forget records that the grant gave up its connection.
func (g *grant) forget(sessionGone bool, why error) {
	g.conn, g.ended, g.sessionGone = nil, why, sessionGone
	g.l.held.Add(-1)
	g.l.grants.Delete(g)
}

// endedErr is the error of an operation on a grant whose connection is
// given up: a lost lock for Extend when the session ended, not held
// otherwise (Release has nothing left to do either way).
func (g *grant) endedErr(extend bool) error {
	if extend && g.sessionGone {
		return fmt.Errorf("%w: %w", dlock.ErrLockLost, g.ended)
	}
	return fmt.Errorf("%w: %w", dlock.ErrNotHeld, g.ended)
}
