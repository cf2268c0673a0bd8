package dlocktest

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// backend is the name a Locker's events give their backend (dlock.Event's
// Backend) and the Node of its NodeErrors.
const backend = "dlocktest"

// Locker is an in-memory lock server and its client in one: a dlock.Locker
// for tests, with the controls the package documentation describes. It is
// safe for concurrent use. The zero Locker is not usable; call New.
type Locker struct {
	events driver.Events
	offset atomic.Int64 // how far (ns) Advance moved the clock ahead of the machine's

	mu      sync.Mutex
	keys    map[string]*entry
	fences  map[string]uint64 // per key: the last fence drawn
	waiters map[string]map[chan struct{}]struct{}
	granted chan struct{} // made by WaitHeld, closed at the next grant
	// The faults: every request fails with down (if set), and the next
	// failLeft requests with failErr.
	down     error
	failErr  error
	failLeft int
}

// entry is a held key: its holder's token and handle, and when its TTL
// runs out on the Locker's clock.
type entry struct {
	token    string
	expires  time.Time
	lock     *dlock.Lock
	identity string    // driver.Identity of the grant: an election's candidate
	since    time.Time // when it was granted, on the Locker's clock
}

var (
	_ dlock.Locker           = (*Locker)(nil)
	_ driver.ReleaseNotifier = (*Locker)(nil)
	_ driver.TermReader      = (*Locker)(nil)
)

// Option configures a Locker.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	observers []func(context.Context, dlock.Event)
}

// WithObserver adds an observer of every attempt the Locker makes and every
// lock it takes, as the backends' WithObserver does (see dlock.Event); a
// nil observer adds nothing. The locks made by Hold are another owner's:
// their events are not observed.
func WithObserver(observe func(ctx context.Context, e dlock.Event)) Option {
	return func(o *options) { o.observers = append(o.observers, observe) }
}

// WithLogger makes the Locker log its events as the backends do (see
// driver.NewEvents). The default logs nothing, so that a test's output
// stays quiet; a nil logger logs nothing either.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// New returns a Locker with no locks held, its clock on the machine's
// time. A nil option is ignored.
func New(opts ...Option) *Locker {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return &Locker{
		events:  driver.NewEvents(backend, o.logger, o.observers...),
		keys:    map[string]*entry{},
		fences:  map[string]uint64{},
		waiters: map[string]map[chan struct{}]struct{}{},
	}
}

// TryAcquire makes one attempt to take the lock on key for ttl. It returns
// an error matching dlock.ErrNotAcquired when another owner holds key (an
// earlier TryAcquire included: each is another owner), the error of a
// fault the test injected (FailNext, Fail), one matching
// dlock.ErrUnavailable and ctx's error when ctx has ended, and one
// matching dlock.ErrInvalid for a nil ctx, an empty key or a ttl no
// backend accepts.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return l.events.Attempt(ctx, key, func() (*dlock.Lock, error) { return l.tryAcquire(ctx, key, ttl) })
}

func (l *Locker) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := driver.Check(ctx, key, ttl); err != nil {
		return nil, err
	}
	var lock *dlock.Lock
	err := l.request(ctx, func() (err error) {
		lock, err = l.grantLocked(key, ttl, driver.Identity(ctx))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dlock: acquire %q: %w", key, err)
	}
	return lock, nil
}

// ReadTerm says who holds key (driver.TermReader), for dlock.Leader and
// dlock.Observe: the fence of the holder's grant, the identity it was
// asked to publish (dlock.WithIdentity: an election's candidate; none for
// a lock of Hold) and when it was granted, on the Locker's clock. It fails
// as TryAcquire does when the test injected a fault.
func (l *Locker) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	switch {
	case ctx == nil:
		return dlock.Term{}, invalid("nil context")
	case key == "":
		return dlock.Term{}, invalid("empty lock key")
	}
	var t dlock.Term
	err := l.request(ctx, func() error {
		if e := l.liveLocked(key, l.Now()); e != nil {
			t = dlock.Term{Led: true, Leader: e.identity, Fence: e.lock.Fence(), Since: e.since}
		}
		return nil
	})
	if err != nil {
		return dlock.Term{}, fmt.Errorf("dlock: leader %q: %w", key, err)
	}
	return t, nil
}

// invalid is the error of a bad argument, what: it matches dlock.ErrInvalid.
func invalid(what string) error { return fmt.Errorf("%w: %s", dlock.ErrInvalid, what) }

// grantLocked gives key to a new owner for ttl if no one holds it,
// published as identity; l.mu is held.
func (l *Locker) grantLocked(key string, ttl time.Duration, identity string) (*dlock.Lock, error) {
	now := l.Now()
	if l.liveLocked(key, now) != nil {
		return nil, fmt.Errorf("%w (held by another owner)", dlock.ErrNotAcquired)
	}
	token := rand.Text()
	l.fences[key]++
	until := driver.ValidUntil(now, ttl)
	lock := driver.NewLock(key, token, l.fences[key], until, &grant{l: l, key: key, token: token})
	l.keys[key] = &entry{token: token, expires: now.Add(ttl), lock: lock, identity: identity, since: now}
	if l.granted != nil {
		close(l.granted)
		l.granted = nil
	}
	return lock, nil
}

// liveLocked returns key's entry if its TTL has not run out by now, and
// forgets it if it has; l.mu is held.
func (l *Locker) liveLocked(key string, now time.Time) *entry {
	e := l.keys[key]
	if e != nil && !e.expires.After(now) {
		delete(l.keys, key)
		return nil
	}
	return e
}

// request runs f as the server would run a request: not at all when ctx
// has ended or a fault the test injected fails it. f runs under l.mu.
func (l *Locker) request(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.down != nil:
		return &dlock.NodeError{Node: backend, Err: l.down}
	case l.failLeft > 0:
		l.failLeft--
		return &dlock.NodeError{Node: backend, Err: l.failErr}
	}
	return f()
}

// wakeLocked tells the waiters for key that it may be free; l.mu is held.
func (l *Locker) wakeLocked(key string) {
	for ch := range l.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// NotifyRelease registers interest in key (driver.ReleaseNotifier): the
// channel receives a value when key is released, lost (Lose) or runs out
// by a jump of the clock (Advance). dlock.Acquire and dlock.Do call it.
func (l *Locker) NotifyRelease(ctx context.Context, key string) (released <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters[key] == nil {
		l.waiters[key] = map[chan struct{}]struct{}{}
	}
	l.waiters[key][ch] = struct{}{}
	return ch, sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.waiters[key], ch)
		if len(l.waiters[key]) == 0 {
			delete(l.waiters, key)
		}
	})
}

// grant is the server's side of one lock (driver.Grant).
type grant struct {
	l          *Locker
	key, token string
}

// errGone is the refusal of an operation on a lock the server no longer
// holds for the token.
var errGone = fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)

// Now is the Locker's clock, on which the lock is measured.
func (g *grant) Now() time.Time { return g.l.Now() }

func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if err := driver.Check(ctx, g.key, ttl); err != nil {
		return time.Time{}, err
	}
	var until time.Time
	err := g.l.request(ctx, func() error {
		now := g.l.Now()
		e := g.l.liveLocked(g.key, now)
		if e == nil || e.token != g.token {
			return errGone
		}
		e.expires = now.Add(ttl)
		until = driver.ValidUntil(now, ttl)
		return nil
	})
	return until, err
}

func (g *grant) Release(ctx context.Context) error {
	return g.l.request(ctx, func() error {
		e := g.l.liveLocked(g.key, g.l.Now())
		if e == nil || e.token != g.token {
			return errGone
		}
		delete(g.l.keys, g.key)
		g.l.wakeLocked(g.key)
		return nil
	})
}
