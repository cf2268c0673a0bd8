package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/eventtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/redislock"
)

// A holder whose link to the server goes silent (a TCP proxy blackholes
// it): its extensions fail, the lock is lost when its validity runs out,
// and the observer and the logger say so, with the key, fence, backend and
// cause; the grant and the release are Debug records, and nothing is
// logged at Info.
func TestEventsAndLogOfALossThroughTheProxy(t *testing.T) {
	c, proxy := proxiedClient(t, shared, -1)
	rec := eventtest.New()
	l := newLocker(t, c, redislock.WithObserver(rec.Observe), redislock.WithLogger(rec.Logger()))
	key := lockcheck.Key(t)
	ctx := testCtx(t)

	var fence uint64
	err := dlock.Do(ctx, l, key, 400*time.Millisecond, func(ctx context.Context) error {
		fence = dlock.LockFromContext(ctx).Fence()
		proxy.Blackhole(t)
		<-ctx.Done()
		proxy.Heal()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}

	kinds := rec.Kinds()
	if len(kinds) < 2 || kinds[0] != "attempt" || kinds[1] != "granted" {
		t.Fatalf("events %v, want attempt, granted, ...", kinds)
	}
	granted, _ := rec.Wait(ctx, dlock.EventGranted)
	if granted.Backend != "redis" || granted.Nodes != 1 || granted.Fence != fence || granted.Attempts != 1 {
		t.Errorf("granted event %+v, want backend redis, 1 node, fence %d, 1 attempt", granted, fence)
	}
	t.Logf("events %v", kinds)
	lost, _ := rec.Wait(ctx, dlock.EventLost)
	if lost.Detected != "validity ran out" || !errors.Is(lost.Err, dlock.ErrLockLost) || lost.Hold <= 0 || lost.Fence != fence {
		t.Errorf("lost event %+v, want detected \"validity ran out\", ErrLockLost, a hold time and fence %d", lost, fence)
	}

	warn, ok := rec.Find("dlock: lock lost")
	if !ok || warn["level"] != "WARN" || warn["key"] != key || warn["backend"] != "redis" ||
		warn["fence"] != float64(fence) || warn["detected"] != "validity ran out" || warn["cause"] == nil {
		t.Errorf("Warn record of the loss: %v (found %v)", warn, ok)
	}
	if m, ok := rec.Find("dlock: lock granted"); !ok || m["level"] != "DEBUG" || m["fence"] != float64(fence) {
		t.Errorf("Debug record of the grant: %v (found %v)", m, ok)
	}
	if info := rec.Logged("INFO"); len(info) > 0 {
		t.Errorf("records at Info: %v", info)
	}
}

// A lock taken and released: Debug records of the grant and the release
// with the hold time, no Warn and no Info.
func TestLogOfAGrantAndRelease(t *testing.T) {
	rec := eventtest.New()
	l := newLocker(t, shared.Client(t), redislock.WithLogger(rec.Logger()))
	key := lockcheck.Key(t)
	lock, err := l.TryAcquire(testCtx(t), key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	rel, ok := rec.Find("dlock: lock released")
	if !ok || rel["level"] != "DEBUG" || rel["key"] != key || rel["fence"] != float64(lock.Fence()) || rel["held"] == nil {
		t.Errorf("Debug record of the release: %v (found %v)", rel, ok)
	}
	if w := rec.Logged("WARN"); len(w) > 0 {
		t.Errorf("Warn records for a clean cycle: %v", w)
	}
	if info := rec.Logged("INFO"); len(info) > 0 {
		t.Errorf("records at Info: %v", info)
	}
}

// An extension that times out on a silent link fails with its cause and
// leaves the lock held; the next one, over a healed link, succeeds:
// extend_failed, then extended, a Warn record of the failure, no loss.
func TestEventsOfAFailedExtensionThenRecovery(t *testing.T) {
	c, proxy := proxiedClient(t, shared, -1)
	rec := eventtest.New()
	l := newLocker(t, c, redislock.WithObserver(rec.Observe), redislock.WithLogger(rec.Logger()))
	key := lockcheck.Key(t)
	ctx := testCtx(t)

	lock, err := l.TryAcquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(t)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = lock.Extend(short, 5*time.Second)
	cancel()
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Extend over a silent link: %v, want ErrUnavailable", err)
	}
	proxy.Heal()
	if err := lock.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend over the healed link: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	if got, want := strings.Join(rec.Kinds(), " "), "attempt granted extend_failed extended released"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	failed, _ := rec.Wait(ctx, dlock.EventExtendFailed)
	if !errors.Is(failed.Err, dlock.ErrUnavailable) || failed.Backend != "redis" || failed.Fence != lock.Fence() || failed.Took <= 0 {
		t.Errorf("extend_failed event %+v, want ErrUnavailable, backend redis, fence %d, its duration", failed, lock.Fence())
	}
	if _, lost := rec.Find("dlock: lock lost"); lost {
		t.Errorf("a loss was logged: events %v", rec.Kinds())
	}
	if m, ok := rec.Find("dlock: extension failed"); !ok || m["level"] != "WARN" || m["key"] != key || m["cause"] == nil {
		t.Errorf("Warn record of the failed extension: %v (found %v)", m, ok)
	}
}

// A bare TryAcquire reports its attempt and its grant or refusal, as
// Acquire does: its observer sees every lock the Locker makes.
func TestEventsOfBareTryAcquire(t *testing.T) {
	rec := eventtest.New()
	l := newLocker(t, shared.Client(t), redislock.WithObserver(rec.Observe))
	eventtest.CheckTryAcquire(t, l, rec, lockcheck.Key(t), "redis")
}
