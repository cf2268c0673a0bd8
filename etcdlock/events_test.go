package etcdlock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
)

// A lease revoked behind the holder's back: the observer sees the grant and
// the loss from the etcd backend, and the logger gets a Warn record.
func TestEventsAndLogOfALoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	var (
		mu    sync.Mutex
		kinds []string
		lost  dlock.Event
		logs  bytes.Buffer
	)
	observe := func(_ context.Context, e dlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, e.Kind.String())
		if e.Kind == dlock.EventLost {
			lost = e
		}
	}
	logger := slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil))
	l := newLocker(t, c.Client(t), etcdlock.WithObserver(observe), etcdlock.WithLogger(logger))
	err := l.Do(ctx, "observed", 3*time.Second, func(ctx context.Context) error {
		revokeHolder(t, admin, "observed")
		<-ctx.Done()
		return nil
	})
	if err == nil {
		t.Fatal("Do returned nil after the lease was revoked")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kinds) < 3 || kinds[0] != "attempt" || kinds[1] != "granted" {
		t.Fatalf("events %v, want attempt, granted, ..., lost", kinds)
	}
	if lost.Backend != "etcd" || lost.Fence == 0 || lost.Detected == "" {
		t.Fatalf("lost event %+v", lost)
	}
	if out := logs.String(); !strings.Contains(out, `level=WARN msg="dlock: lock lost" key=observed backend=etcd`) {
		t.Fatalf("no Warn record of the loss in:\n%s", out)
	}
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

// Write takes mu, which the test's observer and its checks take too.
func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
