package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// leaseOf is the lease part of a token, in hex.
func leaseOf(t *testing.T, tok string) string {
	t.Helper()
	lease, _, ok := strings.Cut(tok, "-")
	if !ok {
		t.Fatalf("token %q: no lease-revision separator", tok)
	}
	return lease
}

// leases counts the leases the cluster has.
func leases(t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	resp, err := cli.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Leases)
}

// TestLeaseShared: locks of one Locker with one TTL share a lease; each
// has its own token; releasing one leaves the other held; the next lock
// reuses the lease.
func TestLeaseShared(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	a, err := l.TryAcquire(ctx, "sh-a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.TryAcquire(ctx, "sh-b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.Token() == b.Token() || leaseOf(t, a.Token()) != leaseOf(t, b.Token()) {
		t.Fatalf("tokens %q and %q: want one lease, two tokens", a.Token(), b.Token())
	}
	if n := leases(t, admin); n != 1 {
		t.Fatalf("%d leases for two locks of one Locker, want 1", n)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("b after a's release: %v", err)
	}
	other := newLocker(t, c.Client(t))
	if _, err := other.TryAcquire(ctx, "sh-b", 10*time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("another Locker on b after a's release: %v, want ErrNotAcquired", err)
	}
	a2, err := l.TryAcquire(ctx, "sh-a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(t, a2.Token()) != leaseOf(t, b.Token()) || a2.Fence() <= a.Fence() {
		t.Fatalf("a again: token %q fence %d, want b's lease and a fence above %d", a2.Token(), a2.Fence(), a.Fence())
	}
	for _, lock := range []*dlock.Lock{a2, b} {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// With nothing held the lease lapses by itself; it is still reused
	// while it lives.
	a3, err := l.TryAcquire(ctx, "sh-a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a3.Release(ctx)
	if leaseOf(t, a3.Token()) != leaseOf(t, b.Token()) {
		t.Fatalf("after every lock was released: lease %s, want %s reused", leaseOf(t, a3.Token()), leaseOf(t, b.Token()))
	}
}

// TestSharedLeaseValidity: a lock taken on a lease granted earlier is
// valid no longer than the lease is known to live.
func TestSharedLeaseValidity(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	a, err := l.TryAcquire(ctx, "val-a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	time.Sleep(1200 * time.Millisecond)
	b, err := l.TryAcquire(ctx, "val-b", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if leaseOf(t, a.Token()) != leaseOf(t, b.Token()) {
		t.Fatal("the second lock did not share the lease")
	}
	if r := b.Remaining(); r > 1900*time.Millisecond || r <= 0 {
		t.Fatalf("second lock valid for %v on a lease with at most 1.8s left, want that or less", r)
	}
	if !b.ValidUntil().After(a.ValidUntil().Add(-50*time.Millisecond)) || b.ValidUntil().After(a.ValidUntil().Add(50*time.Millisecond)) {
		t.Fatalf("validities %v and %v: both end with the lease", a.ValidUntil(), b.ValidUntil())
	}
}

// TestSharedLeaseLost: when the shared lease is revoked, every lock on it
// is lost: Do's context ends with ErrLockLost, and the other lock's handle
// is lost as soon as the Locker learns of it (its Extend fails with
// ErrLockLost without asking); the Locker then takes locks on a new lease.
func TestSharedLeaseLost(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	other, err := l.TryAcquire(ctx, "lost-y", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	err = dlock.Do(ctx, l, "lost-x", 3*time.Second, func(ctx context.Context) error {
		revokeHolder(t, admin, "lost-x")
		<-ctx.Done()
		return nil
	})
	lockcheck.WantError(t, err, dlock.ErrLockLost)
	if other.Held() {
		t.Fatal("the other lock on the lost lease is still held")
	}
	lockcheck.WantError(t, other.Extend(ctx, 3*time.Second), dlock.ErrLockLost)
	lockcheck.WantError(t, other.Release(ctx), dlock.ErrNotHeld)
	again, err := l.TryAcquire(ctx, "lost-y", 3*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the lease was lost: %v", err)
	}
	if leaseOf(t, again.Token()) == leaseOf(t, other.Token()) {
		t.Fatal("a lock taken on the revoked lease")
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSameNameOneLocker: two acquisitions of one name through one Locker
// queue under two keys (a lease each), so the second waits for the first
// and gets the lock when it is released.
func TestSameNameOneLocker(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	first, err := l.TryAcquire(ctx, "same", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		w, err := dlock.Acquire(ctx, l, "same", 5*time.Second)
		if err != nil {
			t.Errorf("second Acquire: %v", err)
		}
		got <- w
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error { return queueLen(ctx, admin, "same", 2) })
	select {
	case <-got:
		t.Fatal("the second acquisition got the lock while the first held it")
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if w.Fence() <= first.Fence() || leaseOf(t, w.Token()) == leaseOf(t, first.Token()) {
		t.Fatalf("second lock: token %q fence %d; first: %q %d", w.Token(), w.Fence(), first.Token(), first.Fence())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaitsOfOneLocker: three waits of one Locker on one name hold three
// keys in the queue, all are served once the holder releases, one at a
// time, and they leave no key behind.
func TestWaitsOfOneLocker(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	holder, err := newLocker(t, c.Client(t)).TryAcquire(ctx, "three", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, c.Client(t))
	var inside atomic.Int32
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			errs <- dlock.Do(ctx, l, "three", 5*time.Second, func(context.Context) error {
				if n := inside.Add(1); n != 1 {
					return fmt.Errorf("%d waits of one Locker inside at once", n)
				}
				time.Sleep(50 * time.Millisecond)
				inside.Add(-1)
				return nil
			})
		}()
	}
	lockcheck.Eventually(t, 5*time.Second, func() error { return queueLen(ctx, admin, "three", 4) })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := queueLen(ctx, admin, "three", 0); err != nil {
		t.Fatal(err)
	}
}
