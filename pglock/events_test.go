package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/eventtest"
	"github.com/dlock-go/dlock/pglock"
)

// The holder's backend terminated (pg_terminate_backend): Do's check finds
// the session gone, and the observer and the logger report the loss with
// the key, fence, backend and cause; grant and release are Debug records,
// and nothing is logged at Info.
func TestEventsAndLogOfATerminatedSession(t *testing.T) {
	rec := eventtest.New()
	l := newLocker(t, 2, pglock.WithObserver(rec.Observe), pglock.WithLogger(rec.Logger()))
	key := uniqueKey(t)
	ctx := testCtx(t)

	var fence uint64
	err := dlock.Do(ctx, l, key, time.Second, func(ctx context.Context) error {
		fence = dlock.LockFromContext(ctx).Fence()
		terminate(t, pglock.HashKey(key))
		<-ctx.Done()
		return nil
	})
	wantIs(t, err, dlock.ErrLockLost)

	kinds := rec.Kinds()
	if len(kinds) < 3 || kinds[0] != "attempt" || kinds[1] != "granted" {
		t.Fatalf("events %v, want attempt, granted, ..., lost", kinds)
	}
	granted, _ := rec.Wait(ctx, dlock.EventGranted)
	if granted.Backend != "postgres" || granted.Nodes != 1 || granted.Fence != fence {
		t.Errorf("granted event %+v, want backend postgres, 1 node, fence %d", granted, fence)
	}
	lost, _ := rec.Wait(ctx, dlock.EventLost)
	if !errors.Is(lost.Err, dlock.ErrLockLost) || lost.Detected == "" || lost.Fence != fence || lost.Hold <= 0 {
		t.Errorf("lost event %+v, want ErrLockLost, how it was detected, fence %d and a hold time", lost, fence)
	}
	t.Logf("events %v; the loss detected by %q: %v", kinds, lost.Detected, lost.Err)

	warn, ok := rec.Find("dlock: lock lost")
	if !ok || warn["level"] != "WARN" || warn["key"] != key || warn["backend"] != "postgres" ||
		warn["fence"] != float64(fence) || warn["detected"] != lost.Detected || warn["cause"] == nil {
		t.Errorf("Warn record of the loss: %v (found %v)", warn, ok)
	}
	if m, ok := rec.Find("dlock: lock granted"); !ok || m["level"] != "DEBUG" {
		t.Errorf("Debug record of the grant: %v (found %v)", m, ok)
	}
	if info := rec.Logged("INFO"); len(info) > 0 {
		t.Errorf("records at Info: %v", info)
	}
}

// A bare TryAcquire reports its attempt and its grant or refusal, as
// Acquire does: its observer sees every lock the Locker makes.
func TestEventsOfBareTryAcquire(t *testing.T) {
	rec := eventtest.New()
	l := newLocker(t, 2, pglock.WithObserver(rec.Observe))
	eventtest.CheckTryAcquire(t, l, rec, uniqueKey(t), "postgres")
}
