package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/eventtest"
)

// A lease revoked behind the holder's back: the observer sees the grant and
// the loss from the etcd backend, and the logger gets a Warn record.
func TestEventsAndLogOfALoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	rec := eventtest.New()
	l := newLocker(t, c.Client(t), etcdlock.WithObserver(rec.Observe), etcdlock.WithLogger(rec.Logger()))
	err := dlock.Do(ctx, l, "observed", 3*time.Second, func(ctx context.Context) error {
		revokeHolder(t, admin, "observed")
		<-ctx.Done()
		return nil
	})
	if err == nil {
		t.Fatal("Do returned nil after the lease was revoked")
	}
	kinds := rec.Kinds()
	if len(kinds) < 3 || kinds[0] != "attempt" || kinds[1] != "granted" {
		t.Fatalf("events %v, want attempt, granted, ..., lost", kinds)
	}
	lost, _ := rec.Wait(ctx, dlock.EventLost)
	if lost.Backend != "etcd" || lost.Fence == 0 || lost.Detected == "" {
		t.Fatalf("lost event %+v", lost)
	}
	if warn, ok := rec.Find("dlock: lock lost"); !ok || warn["level"] != "WARN" || warn["key"] != "observed" || warn["backend"] != "etcd" {
		t.Fatalf("no Warn record of the loss: %v (found %v)", warn, ok)
	}
}

// A bare TryAcquire reports its attempt and its grant or refusal, as
// Acquire does: its observer sees every lock the Locker makes.
func TestEventsOfBareTryAcquire(t *testing.T) {
	c := etcdtest.Start(t, 1)
	rec := eventtest.New()
	l := newLocker(t, c.Client(t), etcdlock.WithObserver(rec.Observe))
	eventtest.CheckTryAcquire(t, l, rec, "bare", "etcd")
}
