// Package eventtest records what a Locker's observer and logger report,
// for the backends' tests of their events and logs.
package eventtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Recorder keeps every event given to Observe and every record written to
// Logger, safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	events  []dlock.Event
	logs    bytes.Buffer
	changed chan struct{} // closed and replaced at each event
}

// New returns an empty Recorder.
func New() *Recorder { return &Recorder{changed: make(chan struct{})} }

// Observe is an observer for WithObserver.
func (r *Recorder) Observe(_ context.Context, e dlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Logger returns a logger that records every level, Debug included, as
// JSON lines.
func (r *Recorder) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(writer{r}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct{ r *Recorder }

func (w writer) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.logs.Write(p)
}

// Events returns the events seen so far.
func (r *Recorder) Events() []dlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]dlock.Event(nil), r.events...)
}

// Kinds returns the kinds of the events seen so far, in order.
func (r *Recorder) Kinds() []string {
	var ks []string
	for _, e := range r.Events() {
		ks = append(ks, e.Kind.String())
	}
	return ks
}

// Wait returns the first event of kind k, waiting for it until ctx ends
// (then ok is false).
func (r *Recorder) Wait(ctx context.Context, k dlock.EventKind) (e dlock.Event, ok bool) {
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if e.Kind == k {
				r.mu.Unlock()
				return e, true
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return dlock.Event{}, false
		}
	}
}

// Records returns the log records written so far, each decoded from its
// JSON line ("level", "msg", and the attributes by name).
func (r *Recorder) Records() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var recs []map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.logs.Bytes()))
	for {
		var m map[string]any
		if dec.Decode(&m) != nil {
			return recs
		}
		recs = append(recs, m)
	}
}

// Logged returns the records at level ("DEBUG", "INFO", "WARN", "ERROR").
func (r *Recorder) Logged(level string) []map[string]any {
	var out []map[string]any
	for _, m := range r.Records() {
		if m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

// Find returns the first record with message msg.
func (r *Recorder) Find(msg string) (map[string]any, bool) {
	for _, m := range r.Records() {
		if m["msg"] == msg {
			return m, true
		}
	}
	return nil, false
}

// CheckTryAcquire checks the events of bare TryAcquire calls on l, whose
// observer is r (and which has sent it nothing yet), on an unused key:
// the first reports its attempt and its grant (backend, fence, one
// attempt), a second one on the held key its attempt and its refusal
// (ErrNotAcquired), and the release of the first its release.
func CheckTryAcquire(t *testing.T, l dlock.Locker, r *Recorder, key, backend string) {
	t.Helper()
	ctx := context.Background()
	lock, err := l.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, key, 10*time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"attempt", "granted", "attempt", "refused", "released"}
	if got := r.Kinds(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	ev := r.Events()
	if g := ev[1]; g.Key != key || g.Backend != backend || g.Fence != lock.Fence() || g.Attempts != 1 || g.Nodes < 1 {
		t.Errorf("granted event %+v, want key %q, backend %q, fence %d, 1 attempt", g, key, backend, lock.Fence())
	}
	if f := ev[3]; f.Key != key || f.Backend != backend || f.Attempts != 1 || !errors.Is(f.Err, dlock.ErrNotAcquired) {
		t.Errorf("refused event %+v, want key %q, backend %q, 1 attempt, ErrNotAcquired", f, key, backend)
	}
}
