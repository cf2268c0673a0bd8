package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// follower returns a member that is not the leader.
func follower(t *testing.T, c *etcdtest.Cluster) *etcdtest.Member {
	leader := c.Leader(t)
	for _, m := range c.Members {
		if m != leader {
			return m
		}
	}
	t.Fatal("no follower")
	return nil
}

// holdThrough runs Do on key and, while fn holds the lock, runs fault; the
// lock must not be lost, and must be free to another Locker afterwards.
func holdThrough(t *testing.T, c *etcdtest.Cluster, fault func()) {
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	err := dlock.Do(ctx, l, "hold", 3*time.Second, func(ctx context.Context) error {
		fault()
		// Two TTLs past the fault: the lease must have been kept alive.
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock lost: %w", context.Cause(ctx))
		case <-time.After(6 * time.Second):
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do through the fault: %v", err)
	}
	other := newLocker(t, c.Client(t))
	lock, err := dlock.Acquire(ctx, other, "hold", 3*time.Second)
	if err != nil {
		t.Fatalf("Acquire after the hold: %v", err)
	}
	lock.Release(ctx)
}

func TestMemberKilledAndRestartedDuringHold(t *testing.T) {
	c := etcdtest.Start(t, 3)
	holdThrough(t, c, func() {
		m := follower(t, c)
		m.Kill()
		time.Sleep(time.Second)
		m.Restart(t)
	})
	c.WaitHealthy(t)
}

func TestLeaderKilledDuringHold(t *testing.T) {
	c := etcdtest.Start(t, 3)
	holdThrough(t, c, func() { c.Leader(t).Kill() })
}

// TestLeaderKilledDuringWait: a queued waiter gets the lock when the holder
// releases after the leader was killed.
func TestLeaderKilledDuringWait(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	holder := newLocker(t, c.Client(t))
	lock, err := holder.TryAcquire(ctx, "wait", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newLocker(t, c.Client(t))
	got := make(chan error, 1)
	go func() {
		l2, err := dlock.Acquire(ctx, waiter, "wait", 3*time.Second)
		if err == nil {
			if l2.Fence() <= lock.Fence() {
				err = fmt.Errorf("waiter's fence %d not above the holder's %d", l2.Fence(), lock.Fence())
			}
			l2.Release(context.Background())
		}
		got <- err
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error { return queueLen(ctx, admin, "wait", 2) })
	c.Leader(t).Kill()
	select {
	case err := <-got:
		t.Fatalf("waiter returned while the lock was held: %v", err)
	case <-time.After(time.Second):
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release after the leader's death: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// TestCutOffPastTTL: a holder cut off from the cluster loses its lock: Do
// cancels fn's context with ErrLockLost, another client takes the lock when
// the lease expires, and the fence guard refuses the cut-off holder's
// write.
func TestCutOffPastTTL(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	p, err := tcpproxy.New("", c.Members[0].ClientAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cut := newLocker(t, c.Client(t, "http://"+p.Addr))
	other := newLocker(t, c.Client(t))
	admin := c.Client(t)
	guard := fence.NewMemory()
	write := func(f uint64, tok string) error {
		return guard.Write("res", f, tok, func() error { return nil })
	}

	var stale error
	err = dlock.Do(ctx, cut, "cut", time.Second, func(ctx context.Context) error {
		// Do does not hand fn its lock: read its fence and token from
		// the queue, as the first key's create revision and lease.
		resp, err := admin.Get(ctx, "cut/", append([]clientv3.OpOption{clientv3.WithPrefix()}, clientv3.WithFirstCreate()...)...)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read the holder: %v %v", resp, err)
		}
		myFence, myToken := uint64(resp.Kvs[0].CreateRevision), strings.TrimPrefix(string(resp.Kvs[0].Key), "cut/")
		if err := write(myFence, myToken); err != nil {
			return err
		}
		p.Cut()
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
			t.Errorf("fn's context ended with %v, want ErrLockLost", context.Cause(ctx))
		}
		// The other client gets the lock once the lease has expired.
		next, err := dlock.Acquire(ctx, other, "cut", time.Second, dlock.WithRetryDelay(20*time.Millisecond))
		if err != nil {
			next, err = dlock.Acquire(testCtx(t), other, "cut", time.Second)
		}
		if err != nil {
			t.Errorf("other Acquire after the cut: %v", err)
			return nil
		}
		defer next.Release(context.Background())
		if err := write(next.Fence(), next.Token()); err != nil {
			t.Errorf("new holder's write refused: %v", err)
		}
		stale = write(myFence, myToken)
		return nil
	})
	lockcheck.WantError(t, err, dlock.ErrLockLost)
	if !errors.Is(stale, fence.ErrStale) {
		t.Fatalf("stale write after the cut: %v, want fence.ErrStale", stale)
	}
}

// TestLeaseRevokedByAnotherClient: Do notices the revoked lease and cancels
// fn's context with ErrLockLost.
func TestLeaseRevokedByAnotherClient(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	start := time.Now()
	err := dlock.Do(ctx, l, "revoked", 3*time.Second, func(ctx context.Context) error {
		revokeHolder(t, admin, "revoked")
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
			t.Errorf("fn's context ended with %v, want ErrLockLost", context.Cause(ctx))
		}
		return nil
	})
	lockcheck.WantError(t, err, dlock.ErrLockLost)
	t.Logf("loss noticed after %v", time.Since(start))
}

// TestCompactionWhileWaiting: a compaction past the revision a waiter
// watches from (between its read of the key ahead and its watch, so the
// watch is refused as compacted) does not strand it: it reads again and
// gets the lock when the holder releases.
func TestCompactionWhileWaiting(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	holder := newLocker(t, c.Client(t))
	lock, err := holder.TryAcquire(ctx, "compact", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var compacted, watches atomic.Int64
	etcdlock.SetBeforeWatch(func(read int64) {
		watches.Add(1)
		if compacted.Load() != 0 {
			return
		}
		var rev int64
		for i := range 20 {
			resp, err := admin.Put(ctx, fmt.Sprint("filler/", i), "x")
			if err != nil {
				t.Error(err)
				return
			}
			rev = resp.Header.Revision
		}
		if _, err := admin.Compact(ctx, rev); err != nil {
			t.Errorf("compact: %v", err)
		}
		compacted.Store(rev)
	})
	t.Cleanup(func() { etcdlock.SetBeforeWatch(nil) })
	waiter := newLocker(t, c.Client(t))
	got := make(chan error, 1)
	go func() {
		l2, err := dlock.Acquire(ctx, waiter, "compact", 3*time.Second)
		if err == nil {
			l2.Release(context.Background())
		}
		got <- err
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if compacted.Load() == 0 {
			return errors.New("no compaction yet")
		}
		return nil
	})
	select {
	case err := <-got:
		t.Fatalf("waiter returned while the lock was held: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter stranded after the compaction")
	}
	// One refused watch, one from the fresh read: no spinning on the
	// compacted revision while the lock was held.
	if n := watches.Load(); n > 3 {
		t.Fatalf("%d watches of the key ahead, want at most 3", n)
	}
}

// TestFrozenMemberDuringHold: a member frozen (SIGSTOP) while the lock is
// held does not cost the lock, though the client sends a share of its
// requests to it: each renewal attempt is bounded to a fraction of the
// lease and tried again on another member. The lock stays exclusive. The
// client does no keep-alive pings of its own, so it never stops sending
// requests to the frozen member.
func TestFrozenMemberDuringHold(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l := newLocker(t, cli)
	other := newLocker(t, c.Client(t))
	frozen := follower(t, c)
	var checks int
	err = dlock.Do(ctx, l, "frozen", time.Second, func(ctx context.Context) error {
		frozen.Pause(t)
		resumed := false
		defer func() {
			if !resumed {
				frozen.Resume(t)
			}
		}()
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if ctx.Err() != nil {
				return fmt.Errorf("lock lost while a member was frozen: %w", context.Cause(ctx))
			}
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			lock, err := other.TryAcquire(tctx, "frozen", time.Second)
			cancel()
			if err == nil {
				lock.Release(context.Background())
				return errors.New("another Locker got the lock while it was held")
			}
			checks++
		}
		// The release is one request, not retried: let the member catch up
		// first, so that it does not go to a member still frozen.
		frozen.Resume(t)
		resumed = true
		c.WaitHealthy(t)
		if ctx.Err() != nil {
			return fmt.Errorf("lock lost as the member resumed: %w", context.Cause(ctx))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do while a member was frozen for 6s (1s lease): %v", err)
	}
	t.Logf("held through the freeze; %d attempts of another Locker refused", checks)
}
