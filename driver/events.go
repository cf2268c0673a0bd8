package driver

import (
	"context"
	"log/slog"
	"slices"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

// Events is where a Locker's events go: its backend's name, its logger and
// its observers (the Locker's WithLogger and WithObserver options). A
// backend keeps one per Locker and makes every attempt of its TryAcquire
// through it:
//
//	func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
//		return l.events.Attempt(ctx, key, func() (*dlock.Lock, error) { return l.tryAcquire(ctx, key, ttl) })
//	}
//
// so that every attempt and every lock it grants report their events, as
// package dlock's documentation describes. The zero Events reports nothing.
type Events struct {
	backend string
	observe observer // nil: nobody listens
}

type observer = func(context.Context, dlock.Event)

// NewEvents returns the Events of a Locker of backend ("redis", "redlock",
// "postgres", "etcd"): each event goes to the logger first, then to each
// observer in turn. The logger gets a Warn record when a lock is lost or
// an extension fails, and for the first refusal or release that matches
// dlock.ErrMisconfigured (with the server's reason); Debug records for the
// rest, since the caller gets each error anyway; nothing at Info, so that
// a busy service's hot path stays silent. A nil logger, or one whose
// handler is slog.DiscardHandler, logs nothing; with no observer either,
// no event is built.
func NewEvents(backend string, logger *slog.Logger, observers ...func(ctx context.Context, e dlock.Event)) Events {
	list := slices.DeleteFunc(append([]observer{logEvents(logger)}, observers...),
		func(o observer) bool { return o == nil })
	ev := Events{backend: backend}
	if len(list) > 0 {
		ev.observe = func(ctx context.Context, e dlock.Event) {
			for _, o := range list {
				o(ctx, e)
			}
		}
	}
	return ev
}

// Attempt makes one attempt of a TryAcquire on key, try, and returns what
// it returns. It reports that the attempt begins, then, for a bare
// TryAcquire, its grant or refusal (within dlock.Acquire and dlock.Do, the
// wait reports that when it ends). The lock try returns sends its events
// to the Locker's logger and observers from that report on, a loss
// declared before (Lost, from another goroutine) included.
func (ev Events) Attempt(ctx context.Context, key string, try func() (*dlock.Lock, error)) (*dlock.Lock, error) {
	if ev.observe == nil {
		return try()
	}
	actx := ctx
	if actx == nil { // the attempt refuses it; the events need one
		actx = context.Background()
	}
	began := bridge.Attempt(actx, key, ev.backend, ev.observe)
	lock, err := try()
	bridge.Attempted(actx, key, ev.backend, ev.observe, lock, err, began)
	return lock, err
}
