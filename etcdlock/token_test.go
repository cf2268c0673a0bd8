package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// TestTokens: ReleaseToken and ExtendToken work from the key and token
// alone, refuse a stale token with ErrNotHeld and a malformed one with
// ErrInvalid.
func TestTokens(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t), etcdlock.WithPrefix("app/"))
	lock, err := l.TryAcquire(ctx, "tok", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, c.Client(t), etcdlock.WithPrefix("app/"))
	if err := other.ExtendToken(ctx, "tok", lock.Token(), 3*time.Second); err != nil {
		t.Fatalf("ExtendToken: %v", err)
	}
	lockcheck.WantError(t, other.ReleaseToken(ctx, "tok", "zz"), dlock.ErrInvalid)
	if err := other.ReleaseToken(ctx, "tok", lock.Token()); err != nil {
		t.Fatalf("ReleaseToken: %v", err)
	}
	lockcheck.WantError(t, other.ReleaseToken(ctx, "tok", lock.Token()), dlock.ErrNotHeld)
	lockcheck.WantError(t, other.ExtendToken(ctx, "tok", lock.Token(), 3*time.Second), dlock.ErrNotHeld)
	lockcheck.WantError(t, lock.Extend(ctx, 3*time.Second), dlock.ErrNotHeld)
}

// TestWaitOutlivesLease: a waiter queued for several of its lease TTLs
// keeps its place and gets the lock.
func TestWaitOutlivesLease(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	lock, err := l.TryAcquire(ctx, "long", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		w, err := dlock.Acquire(ctx, l, "long", time.Second)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- w
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error { return queueLen(ctx, admin, "long", 2) })
	resp, err := admin.Get(ctx, "long/", queueOrder()...)
	if err != nil {
		t.Fatal(err)
	}
	waiterKey := resp.Kvs[len(resp.Kvs)-1]
	time.Sleep(3500 * time.Millisecond) // 3.5 lease TTLs
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	defer w.Release(context.Background())
	if w.Fence() != uint64(waiterKey.CreateRevision) {
		t.Fatalf("waiter's fence %d, want its first key's revision %d (it lost its place)", w.Fence(), waiterKey.CreateRevision)
	}
}

// TestUnreachable: an attempt on a cluster that cannot be reached ends
// with one sentinel and a *dlock.NodeError naming the endpoints.
func TestUnreachable(t *testing.T) {
	c := etcdtest.Start(t, 1)
	l := newLocker(t, c.Client(t))
	c.Members[0].Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := l.TryAcquire(ctx, "gone", time.Second)
	var ne *dlock.NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("TryAcquire with the cluster down: %v, want a *dlock.NodeError", err)
	}
	if _, breach := lockcheck.Classify(err); breach != nil {
		t.Fatal(breach)
	}
	t.Logf("TryAcquire with the cluster down: %v", err)
}

// TestWaiterKeyDeleted: a waiter whose queue key was deleted behind its back
// does not take the lock without a key; it queues again.
func TestWaiterKeyDeleted(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	lock, err := l.TryAcquire(ctx, "deleted", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		w, err := dlock.Acquire(ctx, l, "deleted", 5*time.Second)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- w
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error { return queueLen(ctx, admin, "deleted", 2) })
	resp, err := admin.Get(ctx, "deleted/", queueOrder()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Delete(ctx, string(resp.Kvs[1].Key)); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	defer w.Release(context.Background())
	now, err := admin.Get(ctx, "deleted/"+leaseOf(t, w.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if len(now.Kvs) != 1 || uint64(now.Kvs[0].CreateRevision) != w.Fence() {
		t.Fatalf("waiter holds fence %d but its key is %v: a lock without a key", w.Fence(), now.Kvs)
	}
}
