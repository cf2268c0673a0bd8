package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// What the backends have to say reaches stderr as one human line per
// event, as dlock's own messages do: the library's warnings through the
// logger the backends get (lineHandler), what happens to a held lock
// through their observer (observe). A lost lock is said once, by the
// command, with what it does about it (see runner.watch).

// logger is the backends' logger (WithLogger): their warnings, such as an
// eviction policy that can drop lock keys, each on one line.
func (a *app) logger() *slog.Logger { return slog.New(&lineHandler{a: a}) }

// lineHandler writes each record at Warn or above as one line on stderr:
// "dlock run: <message> (<attr> <value>, ...)". The records of a lock's
// events, which carry its key, are left out: observe reports those.
type lineHandler struct {
	a     *app
	attrs []slog.Attr
}

func (h *lineHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn
}

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	attrs := slices.Clone(h.attrs)
	r.Attrs(func(at slog.Attr) bool {
		attrs = append(attrs, at)
		return true
	})
	var parts []string
	for _, at := range attrs {
		if at.Key == "key" {
			return nil // a lock's event
		}
		parts = append(parts, at.Key+" "+at.Value.String())
	}
	line := strings.TrimPrefix(r.Message, "dlock/") // "redlock: ...": the part that warns
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	h.a.errorf("%s: %s", h.a.name, line)
	return nil
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lineHandler{a: h.a, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }

// granted is --verbose's line once lock is granted: how long the wait
// took, the fence, the backend, and the holder record that f publishes.
func (a *app) granted(lock *dlock.Lock, waited time.Duration, be *backend, f *backendFlags) {
	holder := "no holder record"
	switch {
	case f.holder && be.kind == "postgres":
		holder = "holder: the lock's name in its session's application_name"
	case f.holder:
		host, _ := os.Hostname()
		holder = fmt.Sprintf("holder host %s, pid %d", host, os.Getpid())
	}
	if f.holder && f.name != "" {
		holder += fmt.Sprintf(", name %q", f.name)
	}
	a.errorf("%s: lock %q granted after %v: fence %d, on %s %s, %s", a.name, lock.Key(),
		waited.Round(time.Millisecond), lock.Fence(), be.kind, strings.Join(be.nodes, ","), holder)
}

// observe is the backends' observer (WithObserver): it reports an
// extension that failed while the lock may still be valid, which dlock
// retries. An extension refused, or a session gone, is the loss that the
// command reports itself.
func (a *app) observe(_ context.Context, e dlock.Event) {
	if e.Kind == dlock.EventExtendFailed && !errors.Is(e.Err, dlock.ErrNotHeld) && !errors.Is(e.Err, dlock.ErrLockLost) {
		a.errorf("%s: extending lock %q failed, retrying while it is valid: %v", a.name, e.Key, e.Err)
	}
}
