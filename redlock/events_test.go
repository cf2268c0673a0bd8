package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/eventtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/redlock"
)

// The lock's keys deleted behind the holder's back on every node: the next
// extension is refused, and the observer and the logger report the loss
// with the key, fence, backend and cause; the grant names how many nodes
// granted it; nothing is logged at Info.
func TestEventsAndLogOfALoss(t *testing.T) {
	rec := eventtest.New()
	l := newLocker(t, shared, redlock.WithObserver(rec.Observe), redlock.WithLogger(rec.Logger()))
	key := lockcheck.Key(t)
	ctx := testCtx(t)

	var fence uint64
	err := dlock.Do(ctx, l, key, time.Second, func(ctx context.Context) error {
		fence = dlock.LockFromContext(ctx).Fence()
		for _, r := range shared {
			if err := client(t, r.Addr).Del(ctx, key).Err(); err != nil {
				t.Fatalf("DEL on %s: %v", r.Addr, err)
			}
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}

	granted, _ := rec.Wait(ctx, dlock.EventGranted)
	if granted.Backend != "redlock" || granted.Nodes < 3 || granted.Nodes > len(shared) || granted.Fence != fence {
		t.Errorf("granted event %+v, want backend redlock, a majority of %d nodes, fence %d", granted, len(shared), fence)
	}
	lost, _ := rec.Wait(ctx, dlock.EventLost)
	if lost.Detected != "extension refused" || !errors.Is(lost.Err, dlock.ErrNotHeld) || lost.Fence != fence {
		t.Errorf("lost event %+v, want detected \"extension refused\", its cause ErrNotHeld, fence %d", lost, fence)
	}
	warn, ok := rec.Find("dlock: lock lost")
	if !ok || warn["level"] != "WARN" || warn["key"] != key || warn["backend"] != "redlock" ||
		warn["fence"] != float64(fence) || warn["detected"] != "extension refused" || warn["cause"] == nil {
		t.Errorf("Warn record of the loss: %v (found %v)", warn, ok)
	}
	if info := rec.Logged("INFO"); len(info) > 0 {
		t.Errorf("records at Info: %v", info)
	}
}

// A bare TryAcquire reports its attempt and its grant or refusal, as
// Acquire does: its observer sees every lock the Locker makes.
func TestEventsOfBareTryAcquire(t *testing.T) {
	rec := eventtest.New()
	l := newLocker(t, shared, redlock.WithObserver(rec.Observe))
	eventtest.CheckTryAcquire(t, l, rec, lockcheck.Key(t), "redlock")
}
