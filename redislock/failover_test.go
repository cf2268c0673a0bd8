package redislock_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testsrv"
)

// F9: the single-node lock's documented hole. A master replicates
// asynchronously; it grants A the lock and dies before the replica has the
// key; the promoted replica grants B the same lock. The fence counter went
// back with it, so B's fence is not above A's — and the resource's guard,
// which saw A's write, refuses B's (the tie rule at work): safety is kept by
// the resource, at the cost of availability.
func TestFailoverToStaleReplica(t *testing.T) {
	master := testsrv.StartRedis(t, testsrv.RedisArgs("--repl-diskless-sync-delay", "0"))
	// The replica reaches its master through a proxy, so the test can stall
	// replication without the kernel buffering the stream for later.
	link := testproxy.Start(t, master.Addr)
	host, port, _ := net.SplitHostPort(link.Addr)
	replica := testsrv.StartRedis(t, testsrv.RedisArgs("--replicaof", host, port))
	mc, rc := master.Client(t), replica.Client(t)
	eventually(t, "replica in sync", func() bool {
		return strings.Contains(rc.Info(testCtx(t), "replication").Val(), "master_link_status:up")
	})

	lm := newLocker(t, mc)
	key := locktest.Key(t)
	warm, err := lm.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(testCtx(t))
	if n := mc.Wait(testCtx(t), 1, 2000).Val(); n != 1 {
		t.Fatalf("WAIT: %d replicas acknowledged, want 1", n)
	}

	guard := fence.NewMemory()
	link.Blackhole(t) // replication stalls
	a, err := lm.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Write("ledger", a.Fence(), a.Token(), func() error { return nil }); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	master.Kill()
	if err := rc.SlaveOf(testCtx(t), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote replica: %v", err)
	}

	b, err := newLocker(t, rc).TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatalf("B on the promoted replica: %v (the documented race should let B in)", err)
	}
	if b.Fence() > a.Fence() {
		t.Fatalf("B's fence %d above A's %d: the counter did not go back, so this test shows nothing", b.Fence(), a.Fence())
	}
	err = guard.Write("ledger", b.Fence(), b.Token(), func() error { return nil })
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("guard accepted B's write with fence %d after A's %d: %v", b.Fence(), a.Fence(), err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
