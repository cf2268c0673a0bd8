package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// Inspect reports the holder (its token, its fence, a TTL)
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
			_, err := dlock.Acquire(waitCtx, l, "insp/a", 10*time.Second)
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
	lockcheck.Eventually(t, 10*time.Second, func() error { // the waiters queue in their own time
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
	// "*" is every name, slashes included, as on every backend (`dlock
	// inspect`'s default).
	all, err := l.Inspect(ctx, "*", 0)
	if err != nil || len(all) != 2 || all[0].Key != "insp/a" || all[1].Key != "other" {
		t.Fatalf("Inspect(*) = %+v, %v; want insp/a and other", all, err)
	}
}

// TestInspectHolderInfo: with WithHolderInfo the lock's key carries the
// holder record and Inspect reports it; without it the value is empty, as
// a Mutex's, and Inspect reports no holder.
func TestInspectHolderInfo(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := testCtx(t)
	before := time.Now().Add(-time.Second)
	l := newLocker(t, c.Client(t), etcdlock.WithHolderInfo("billing"))
	lock, err := l.TryAcquire(ctx, "who", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	plain, err := newLocker(t, c.Client(t)).TryAcquire(ctx, "anon", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(context.Background())
	infos, err := l.Inspect(ctx, "*", 0)
	if err != nil || len(infos) != 2 {
		t.Fatalf("Inspect = %+v, %v; want anon and who", infos, err)
	}
	if all, err := l.Inspect(ctx, "", 0); err != nil || len(all) != 2 {
		t.Fatalf("Inspect(\"\") = %+v, %v; want anon and who, as for \"*\" on every backend", all, err)
	}
	host, _ := os.Hostname()
	anon, who := infos[0], infos[1]
	if who.Key != "who" || who.Host != host || who.PID != os.Getpid() || who.Service != "billing" ||
		who.Since.Before(before) || who.Since.After(time.Now()) {
		t.Fatalf("Inspect(who) = %+v, want host %s, pid %d, service billing, since about now", who, host, os.Getpid())
	}
	if anon.Key != "anon" || anon.Host != "" || anon.PID != 0 || !anon.Since.IsZero() {
		t.Fatalf("Inspect(anon) = %+v, want no holder", anon)
	}
	if _, err := etcdlock.New(c.Client(t), etcdlock.WithHolderInfo("")); err != nil {
		t.Fatalf("WithHolderInfo(\"\"): %v, want accepted", err)
	}
}
