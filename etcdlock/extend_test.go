package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
)

// holderKey reads the first key of name's queue.
func holderKey(t *testing.T, cli *clientv3.Client, name string) *clientv3.GetResponse {
	t.Helper()
	resp, err := cli.Get(context.Background(), name+"/", append([]clientv3.OpOption{clientv3.WithPrefix()}, clientv3.WithFirstCreate()...)...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read the holder of %q: %v %v", name, resp, err)
	}
	return resp
}

// TestExtendTokenBeyondLease: ExtendToken with a TTL above the lease the
// lock was taken with keeps the lock for that TTL, as `dlock extend -t 1m`
// after `dlock acquire -t 1s` does: another Locker is refused long after
// the first lease would have ended, the fence and the token stay, and
// ReleaseToken still releases it.
func TestExtendTokenBeyondLease(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	taker := newLocker(t, c.Client(t))
	lock, err := taker.TryAcquire(ctx, "beyond-tok", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The taker is gone from here on, as a `dlock acquire` that exited.
	extender := newLocker(t, c.Client(t))
	if err := extender.ExtendToken(ctx, "beyond-tok", lock.Token(), 8*time.Second); err != nil {
		t.Fatalf("ExtendToken for 8s: %v", err)
	}
	time.Sleep(3 * time.Second) // three times the first lease
	other := newLocker(t, c.Client(t))
	if l2, err := other.TryAcquire(ctx, "beyond-tok", time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			l2.Release(ctx)
		}
		t.Fatalf("another Locker 3s after an extension to 8s of a 1s lock: %v, want ErrNotAcquired", err)
	}
	if got := holderKey(t, admin, "beyond-tok").Kvs[0].CreateRevision; uint64(got) != lock.Fence() {
		t.Fatalf("holder's create revision %d after the extension, want the fence %d", got, lock.Fence())
	}
	// Once more, through a third Locker: the token still names the lock.
	if err := newLocker(t, c.Client(t)).ExtendToken(ctx, "beyond-tok", lock.Token(), 8*time.Second); err != nil {
		t.Fatalf("ExtendToken again: %v", err)
	}
	if err := other.ReleaseToken(ctx, "beyond-tok", lock.Token()); err != nil {
		t.Fatalf("ReleaseToken after the extension: %v", err)
	}
	l3, err := other.TryAcquire(ctx, "beyond-tok", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	l3.Release(ctx)
	// The lease granted for the extension went with the release.
	all, err := admin.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ls := range all.Leases {
		if ttl, err := admin.TimeToLive(ctx, ls.ID); err == nil && ttl.GrantedTTL == 8 {
			t.Fatalf("lease %x of 8s still there after the release", ls.ID)
		}
	}
}

// TestExtendBeyondLease: Lock.Extend with a TTL above the lease's is
// honoured: the handle is valid for that TTL and nobody else gets the
// lock meanwhile; a concurrency.Mutex waiting on the name still waits
// (the key kept its create revision) and gets the lock on release.
func TestExtendBeyondLease(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	lock, err := l.TryAcquire(ctx, "beyond", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Extend(ctx, 8*time.Second); err != nil {
		t.Fatalf("Extend to 8s: %v", err)
	}
	if r := lock.Remaining(); r < 7*time.Second {
		t.Fatalf("Remaining %v after Extend to 8s, want about 8s", r)
	}
	infos, err := l.Inspect(ctx, "beyond", 0)
	if err != nil || len(infos) != 1 || infos[0].Token != lock.Token() || infos[0].Fence != lock.Fence() || infos[0].TTL < 5*time.Second {
		t.Fatalf("Inspect after Extend to 8s: %+v, %v; want token %s, fence %d, a TTL of about 8s", infos, err, lock.Token(), lock.Fence())
	}
	sess, err := concurrency.NewSession(c.Client(t), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	m := concurrency.NewMutex(sess, "beyond")
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	time.Sleep(3 * time.Second) // three times the first lease
	select {
	case err := <-locked:
		t.Fatalf("a Mutex got the lock 3s after its extension to 8s (%v)", err)
	default:
	}
	other := newLocker(t, c.Client(t))
	if _, err := other.TryAcquire(ctx, "beyond", time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("another Locker 3s after an extension to 8s: %v, want ErrNotAcquired", err)
	}
	if !lock.Held() {
		t.Fatal("the extended lock is not held 3s later")
	}
	if err := lock.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend back to 1s: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("Mutex.Lock after the release: %v", err)
	}
	if uint64(m.Header().Revision) <= lock.Fence() {
		t.Fatalf("Mutex's revision %d not above the fence %d", m.Header().Revision, lock.Fence())
	}
	_ = m.Unlock(ctx)
}
