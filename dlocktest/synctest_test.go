package dlocktest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// In a testing/synctest bubble the Locker follows the bubble's clock, and
// so do Do's and Acquire's timers: Do keeps a one-minute lock through an
// hour of the function's work, and a waiter gets a key held for an hour
// once that hour is over, in no real time.
func TestSynctestBubble(t *testing.T) {
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		l := dlocktest.New()
		var lock *dlock.Lock
		err := dlock.Do(t.Context(), l, "report", time.Minute, func(ctx context.Context) error {
			lock = dlock.LockFromContext(ctx)
			time.Sleep(time.Hour)
			return context.Cause(ctx)
		})
		if err != nil {
			t.Fatalf("Do through an hour of work: %v", err)
		}

		if _, err := l.Hold("busy", time.Hour); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		next, err := dlock.Acquire(t.Context(), l, "busy", time.Minute, dlock.WithRetryDelay(time.Minute))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if waited := time.Since(start); waited < time.Hour || waited > time.Hour+2*time.Minute {
			t.Fatalf("the waiter got the key after %v, want an hour (when its holder's TTL ran out)", waited)
		}
		if err := next.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if lock.Held() {
			t.Fatal("Do's lock still held after Do returned")
		}
	})
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("two hours in the bubble took %v of real time", d)
	}
}
