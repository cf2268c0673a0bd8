package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/locktest"
)

// Inspect reports the holder (its lease as the token, its fence, a TTL)
// and the waiters queued behind it, for the names the pattern matches.
func TestInspect(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	lock, err := l.TryAcquire(ctx, "insp/a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.TryAcquire(ctx, "other", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.Background())
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Acquire(waitCtx, "insp/a", 10*time.Second)
			done <- err
		}()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("waiter: %v, want context.Canceled", err)
			}
		}
		lock.Release(context.Background())
	}()
	var got dlock.LockInfo
	locktest.Eventually(t, 10*time.Second, func() error { // the waiters queue in their own time
		infos, err := l.Inspect(ctx, "insp/*", 0)
		if err != nil || len(infos) != 1 || infos[0].Waiting != 2 {
			return fmt.Errorf("Inspect(insp/*) = %+v, %v; want one lock with 2 waiting", infos, err)
		}
		got = infos[0]
		return nil
	})
	if got.Key != "insp/a" || got.Token != lock.Token() || got.Fence != lock.Fence() || got.Waiting != 2 || got.TTL <= 0 || !got.Majority {
		t.Fatalf("Inspect(insp/*) = %+v, want insp/a held with token %s, fence %d, 2 waiting", got, lock.Token(), lock.Fence())
	}
	if _, err := l.Inspect(ctx, "[", 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("bad pattern: %v, want ErrInvalid", err)
	}
}
