package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
)

// TestAbandonedKeyRetried: a waiter that gives up while its Locker cannot
// reach the cluster fails to delete its queue key; the key must not block
// the lock while the Locker's other lock keeps their shared lease alive.
// The deletion is retried, and the next contender gets the lock once the
// holder releases it.
func TestAbandonedKeyRetried(t *testing.T) {
	const ttl = 5 * time.Second
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	p, err := tcpproxy.New("", c.Members[0].ClientAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := newLocker(t, c.Client(t, "http://"+p.Addr))
	holder, err := newLocker(t, c.Client(t)).TryAcquire(ctx, "abandoned", ttl)
	if err != nil {
		t.Fatal(err)
	}

	// w holds another lock for the whole test: its extensions keep the
	// lease it shares with the waiter alive.
	keep := make(chan struct{})
	kept := make(chan error, 1)
	go func() {
		kept <- dlock.Do(ctx, w, "abandoned-other", ttl, func(ctx context.Context) error {
			select {
			case <-keep:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	}()
	defer func() {
		close(keep)
		if err := <-kept; err != nil {
			t.Errorf("the other lock: %v", err)
		}
	}()

	waitCtx, giveUp := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		lock, err := dlock.Acquire(waitCtx, w, "abandoned", ttl)
		if err == nil {
			lock.Release(ctx)
		}
		waited <- err
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error { return queueLen(ctx, admin, "abandoned", 2) })

	// The waiter gives up while the network drops everything; its delete
	// is lost with the connections.
	p.Blackhole(true)
	giveUp()
	if err := <-waited; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("the waiter that gave up: %v, want ErrNotAcquired", err)
	}
	time.Sleep(300 * time.Millisecond) // the delete is sent, and held
	p.Reset()
	p.Blackhole(false)

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := newLocker(t, c.Client(t))
	nextCtx, cancel := context.WithTimeout(ctx, 2*ttl)
	defer cancel()
	start := time.Now()
	lock, err := dlock.Acquire(nextCtx, next, "abandoned", ttl)
	if err != nil {
		resp, _ := admin.Get(ctx, "abandoned/", queueOrder()...)
		t.Fatalf("the next contender after the holder's release: %v (queue: %v)", err, resp.Kvs)
	}
	t.Logf("the next contender got the lock %v after the release", time.Since(start))
	lock.Release(ctx)
}
