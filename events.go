package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// EventKind says what happened to a lock (see Event).
type EventKind uint8

// The events a lock goes through, in the order they can happen.
const (
	EventAttempt      EventKind = iota + 1 // an attempt to take the lock began: Attempts counts it
	EventGranted                           // the lock was taken: Fence, Wait, Attempts, Nodes
	EventRefused                           // Acquire or Do ended without the lock: Err, Wait, Attempts
	EventExtended                          // an extension succeeded
	EventExtendFailed                      // an extension failed: Err (the lock may still be held)
	EventLost                              // the lock was lost: Err, Detected, Hold
	EventReleased                          // a Release ended: Err (nil: the lock was deleted), Hold
)

var kindNames = [...]string{
	"unknown", "attempt", "granted", "refused", "extended", "extend_failed", "lost", "released",
}

// String returns the kind's name: "attempt", "granted", "refused",
// "extended", "extend_failed", "lost" or "released".
func (k EventKind) String() string {
	if int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// Event is one thing that happened to a lock, as the observers of the
// Locker that made it see it (see Events in the package documentation).
// Fields that do not apply to the kind are zero.
type Event struct {
	Kind EventKind
	// Key is the key the attempt was for, and from the grant on the
	// lock's (a semaphore's permit: its slot's key, {name}#slot).
	Key string
	// Backend names the backend ("redis", "redlock", "postgres", "etcd",
	// "dlocktest"; "" if it does not say), and Nodes how many of its nodes
	// granted the lock (Redlock's majority; 1 elsewhere).
	Backend string
	Nodes   int
	Fence   uint64
	// Attempts is the number of attempts made so far (EventAttempt,
	// EventGranted, EventRefused); Wait the time since Acquire began
	// (EventGranted, EventRefused); Hold the time since the grant
	// (EventLost, EventReleased).
	Attempts int
	Wait     time.Duration
	Hold     time.Duration
	// Took is how long the call took (EventExtended, EventExtendFailed,
	// EventReleased).
	Took time.Duration
	// Err is why: the refusal (matching ErrNotAcquired, ErrUnavailable,
	// ErrMisconfigured or ErrInvalid), the failed extension, the loss, or
	// the release's error.
	Err error
	// Detected says how a loss was found: "extension refused" (the server
	// no longer held the lock), "session gone" (the backend reported the
	// lock's session or lease gone), or "validity ran out" (no extension
	// succeeded in time).
	Detected string
}

// waiting is Acquire's record of its wait, in each attempt's context; the
// attempts set backend and observe for Acquire's grant or refusal.
type waiting struct {
	attempts int
	began    time.Time
	identity string
	backend  string
	observe  func(context.Context, Event) // nil: the Locker has no observers
}

type waitKey struct{}

// waitingIn returns ctx's waiting, or nil (a bare TryAcquire's; ctx may be nil).
func waitingIn(ctx context.Context) *waiting {
	if ctx == nil {
		return nil
	}
	w, _ := ctx.Value(waitKey{}).(*waiting)
	return w
}

func init() {
	bridge.Attempt, bridge.Attempted = attempt, attempted
	bridge.Identity = func(ctx context.Context) string {
		if w := waitingIn(ctx); w != nil {
			return w.identity
		}
		return ""
	}
}

// attempt reports an attempt on key of a Locker of backend to observe,
// and returns when it began, or the zero time for one of Acquire's.
func attempt(ctx context.Context, key, backend string, observe any) time.Time {
	obs := observe.(func(context.Context, Event))
	n, began := 1, time.Now()
	if w := waitingIn(ctx); w != nil {
		w.backend, w.observe = backend, obs
		n, began = w.attempts, time.Time{}
	}
	obs(ctx, Event{Kind: EventAttempt, Key: key, Backend: backend, Attempts: n})
	return began
}

// attempted reports the grant or refusal of a bare TryAcquire, begun at
// began (Acquire reports its own when its wait ends).
func attempted(ctx context.Context, key, backend string, observe, lock any, err error, began time.Time) {
	if !began.IsZero() {
		w := waiting{attempts: 1, began: began, backend: backend, observe: observe.(func(context.Context, Event))}
		w.report(ctx, key, lock.(*Lock), err)
	}
}

// report sends the wait's grant or refusal to the Locker's observers, if
// any, and then makes the lock granted send its events to them (attach).
func (w *waiting) report(ctx context.Context, key string, lock *Lock, err error) {
	if w.observe == nil {
		return
	}
	e := Event{Kind: EventRefused, Key: key, Backend: w.backend, Attempts: w.attempts,
		Wait: time.Since(w.began), Err: err}
	if err == nil {
		e.Kind, e.Key, e.Fence, e.Nodes = EventGranted, lock.key, lock.fence, lock.nodes
	}
	w.observe(ctx, e)
	if err == nil {
		lock.attach(w.backend, w.observe)
	}
}

// attach makes l send its events to observe, the observers of its Locker
// of backend, after its grant's event. The grant was visible before (to
// the backend, which may declare it lost from another goroutine; to
// package dlocktest's WaitHeld): a loss declared meanwhile, which no one
// observed, is sent now.
func (l *Lock) attach(backend string, observe func(context.Context, Event)) {
	defer l.deliver()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.backend, l.observe = backend, observe
	if l.state == stateLost {
		l.recordLocked(context.Background(), Event{Kind: EventLost, Err: l.lostCause, Detected: l.lostHow})
	}
}

type queued struct {
	ctx context.Context
	e   Event
}

// recordLocked fills e in and queues it for deliver, which calls the
// observer under none of the lock's mutex and turn: it may look into ctx
// (Do's context looks at the lock) and call the lock's methods.
func (l *Lock) recordLocked(ctx context.Context, e Event) {
	if l.observe == nil {
		return
	}
	e.Key, e.Fence, e.Backend, e.Nodes = l.key, l.fence, l.backend, l.nodes
	if e.Kind == EventLost || e.Kind == EventReleased {
		e.Hold = l.now().Sub(l.grantedAt)
	}
	if len(l.pending) == 0 {
		l.pending = l.buf[:0]
	}
	l.pending = append(l.pending, queued{ctx, e})
}

// deliver sends the recorded events to the observer, one at a time, in
// order, unless another goroutine is delivering (an observer that called
// back into the lock, a concurrent call): that one sends them. If the
// observer panics, the panic goes on, and the next deliver sends the rest.
func (l *Lock) deliver() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.delivering {
		return
	}
	l.delivering = true
	defer func() { l.delivering = false }()
	for len(l.pending) > 0 {
		q := l.pending[0]
		l.pending[0] = queued{}
		l.pending = l.pending[1:]
		observe := l.observe
		l.mu.Unlock()
		func() {
			defer l.mu.Lock()
			observe(q.ctx, q.e)
		}()
	}
}
