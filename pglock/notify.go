package pglock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// Wake-on-release (Waiting in the package documentation; the release
// statement: buildStatements). With nobody waiting, a release sends no
// NOTIFY (an xid and a WAL flush; bench/RESULTS.md).
//
// No release is missed. The listener wakes every waiter once after its
// LISTEN and its waitKey lock are both in place: a release unlocking
// before that is found by the waiter's retry; one unlocking after looks
// for waitKey after the unlock (CASE evaluates in order), finds it held,
// and NOTIFYs after the LISTEN. A waiter registers before its attempt, and
// the listener holds waitKey while anyone is registered. A release that
// finds waitKey held only by another releaser's short exclusive lock sends
// a needless NOTIFY: harmless.
//
// A notification is only a hint: the woken waiter must still win
// pg_try_advisory_lock. Releases that send none (a dying session, no
// notifications, a lost listener) are found by polling.

const notifyChannel = "dlock_release"

var _ driver.ReleaseNotifier = (*Locker)(nil)

// listener is a Locker's LISTEN connection and the registry of its waiters.
type listener struct {
	l       *Locker
	mu      sync.Mutex
	byKey   map[string][]chan struct{} // notifyID → waiters in arrival order
	cancel  context.CancelFunc         // stops the running loop; nil when none runs
	running sync.WaitGroup
	closed  bool // after Close, or from the start without notifications
}

// NotifyRelease implements driver.ReleaseNotifier: the channel receives a
// value when the lock on key may have been released. It sends nothing to
// the server itself. stop must be called exactly once. With notifications
// off (WithReleaseNotify(false)), for keys the key function rejects, and
// after Close the channel never fires and waits poll.
func (l *Locker) NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func()) {
	if !l.notify {
		return nil, func() {}
	}
	k, err := l.resolve(ctx, key, nil, nil)
	if err != nil {
		return nil, func() {}
	}
	return l.notifyKeys(k)
}

// notifyKeys is NotifyRelease for Keys: one registration on every key, so
// that the release of any of them wakes the wait (a semaphore's slots).
func (l *Locker) notifyKeys(keys ...Key) (released <-chan struct{}, stop func()) {
	n := l.listener
	w := make(chan struct{}, 1)
	n.mu.Lock()
	if n.closed || slices.ContainsFunc(keys, func(k Key) bool { return !k.valid() }) {
		n.mu.Unlock()
		return nil, func() {}
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.notifyID()
		n.byKey[ids[i]] = append(n.byKey[ids[i]], w)
	}
	n.mu.Unlock()
	return w, sync.OnceFunc(func() {
		for _, id := range ids {
			n.leave(id, w)
		}
	})
}

// Close stops the Locker's release listener (a goroutine and a connection
// that exist only while acquisitions wait) and waits for it; waits then
// poll. Locks, TryAcquire and Release keep working. Close does not close
// the pool, may be called more than once, and returns nil.
func (l *Locker) Close() error {
	n := l.listener
	n.mu.Lock()
	n.closed = true
	if n.cancel != nil {
		n.cancel()
	}
	n.mu.Unlock()
	n.running.Wait()
	return nil
}

// busy makes sure the listener runs if anyone waits for k, found held.
func (l *Locker) busy(k Key) {
	n := l.listener
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.cancel != nil || len(n.byKey[k.notifyID()]) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.running.Go(func() { n.run(ctx) })
}

// leave ends w's wait, passing a wake-up it did not use to the key's next
// waiter; the last waiter of all stops the listener.
func (n *listener) leave(id string, w chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := n.byKey[id]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(n.byKey, id)
	} else {
		n.byKey[id] = ws
		select {
		case <-w:
			signal(ws[0])
		default:
		}
	}
	if len(n.byKey) == 0 && n.cancel != nil {
		n.cancel()
		n.cancel = nil
	}
}

// run owns the LISTEN connection until ctx ends, reconnecting with a
// backoff when it breaks.
func (n *listener) run(ctx context.Context) {
	var backoff time.Duration
	for ctx.Err() == nil {
		listened, err := n.listen(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		if listened {
			backoff = 0 // it worked for a while: a new run of failures
		}
		if backoff == 0 { // once per run of failures
			n.l.cfg.Logger.Warn("dlock/pglock: release listener failed; waiters poll until it reconnects",
				"node", n.l.node, "err", nodeerr.OneLine(err).Error())
		}
		backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
		backend.Sleep(ctx, backoff) // the loop ends if ctx does
	}
}

// listen opens its connection, LISTENs and takes waitKey in share mode,
// wakes every waiter once (a release may have come before), and dispatches
// notifications until ctx ends (nil) or the connection fails (listened:
// after the LISTEN).
func (n *listener) listen(ctx context.Context) (listened bool, err error) {
	conn, err := n.l.connectListener(ctx)
	if err != nil {
		return false, err
	}
	defer closeConn(conn)
	// The share lock waits only for a release's statement-long hold.
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel+"; SELECT pg_advisory_lock_shared("+waitKeySQL+")"); err != nil {
		return false, err
	}
	n.wakeAll()
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			n.wakeAll() // notifications may be lost until we listen again
			return true, err
		}
		n.released(msg.Payload)
	}
}

func (n *listener) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ws := range n.byKey {
		for _, w := range ws {
			signal(w)
		}
	}
}

func (n *listener) released(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ws := n.byKey[id]; len(ws) > 0 {
		signal(ws[0])
	}
}

// signal wakes w unless a wake-up is already pending.
func signal(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// connectListener opens the LISTEN connection outside the pool, with the
// pool's settings and connect hooks: from the pool, it would take the
// connection the attempts it serves need (a pool of two, one lock held).
func (l *Locker) connectListener(ctx context.Context) (*pgx.Conn, error) {
	cfg := l.pool.Config()
	cc := cfg.ConnConfig // a copy already
	if cfg.BeforeConnect != nil {
		if err := cfg.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if cfg.AfterConnect != nil {
		if err := cfg.AfterConnect(ctx, conn); err != nil {
			closeConn(conn)
			return nil, err
		}
	}
	return conn, nil
}

// closeConn closes conn, waiting at most a second to send Terminate.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	conn.Close(ctx)
	cancel()
}
