package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
)

// TestTryAcquireRefusedLeavesNothing: a refused TryAcquire has taken its
// key out of the queue when it returns. A process that exits right after
// (dlock run -n) must not leave a key that blocks the next holder for its
// TTL after the current one releases.
func TestTryAcquireRefusedLeavesNothing(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	l := newLocker(t, cli)
	ctx := context.Background()
	held, err := l.TryAcquire(ctx, "refused", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := l.TryAcquire(ctx, "refused", 10*time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire on a held lock: %v", err)
		}
		resp, err := cli.Get(ctx, "refused/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 1 {
			t.Fatalf("attempt %d: %d keys in the queue after a refused TryAcquire returned, want 1 (the holder's)", i, resp.Count)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestContendersOfOneLockerSendNothing: TryAcquires of a name the Locker
// holds are refused without a request: no lease is granted for them and no
// Raft commit made (a hundred of them once cost a hundred commits, which a
// loaded 3-member test cluster did not always serve in time).
func TestContendersOfOneLockerSendNothing(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := context.Background()
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	held, err := l.TryAcquire(ctx, "crowd", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before, err := admin.Get(ctx, "crowd")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := l.TryAcquire(ctx, "crowd", 10*time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire of a name the Locker holds: %v, want ErrNotAcquired", err)
			}
		})
	}
	wg.Wait()
	after, err := admin.Get(ctx, "crowd")
	if err != nil {
		t.Fatal(err)
	}
	if n := leases(t, admin); n != 1 || after.Header.Revision != before.Header.Revision {
		t.Fatalf("50 refused TryAcquires: %d leases (want 1), revision %d -> %d (want unchanged)", n, before.Header.Revision, after.Header.Revision)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := l.TryAcquire(ctx, "crowd", 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	again.Release(ctx)
}
