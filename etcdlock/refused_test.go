package etcdlock_test

import (
	"context"
	"errors"
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
