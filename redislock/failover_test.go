package redislock_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// The single-node lock's documented hole, and what the fence does about it.
// A master replicates asynchronously; it grants A the lock and dies before
// the replica has the key or the new counter; the promoted replica grants B
// the same lock. Exclusion is lost, but the fence is not: the replica's
// stale counter is below the server's clock, so B's fence is above A's, and
// the resource's guard, which saw B's write, refuses A's late one. (Before
// the clock rule, B's fence was A's again and the guard refused B instead.)
func TestFailoverToStaleReplica(t *testing.T) {
	master := testsrv.StartRedis(t, testsrv.RedisArgs("--repl-diskless-sync-delay", "0"))
	// The replica reaches its master through a proxy, so the test can stall
	// replication without the kernel buffering the stream for later.
	link := testproxy.Start(t, master.Addr)
	host, port, _ := net.SplitHostPort(link.Addr)
	replica := testsrv.StartRedis(t, testsrv.RedisArgs("--replicaof", host, port))
	mc, rc := master.Client(t), replica.Client(t)
	lockcheck.Eventually(t, 10*time.Second, func() error {
		if info := rc.Info(testCtx(t), "replication").Val(); !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not in sync: %s", info)
		}
		return nil
	})

	lm := newLocker(t, mc)
	key := lockcheck.Key(t)
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
	if err := rc.Do(testCtx(t), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote replica: %v", err)
	}

	b, err := newLocker(t, rc).TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatalf("B on the promoted replica: %v (the documented race should let B in)", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d is not above A's %d: the promoted replica's counter went back", b.Fence(), a.Fence())
	}
	if err := guard.Write("ledger", b.Fence(), b.Token(), func() error { return nil }); err != nil {
		t.Fatalf("guard refused B's write with fence %d after A's %d: %v", b.Fence(), a.Fence(), err)
	}
	err = guard.Write("ledger", a.Fence(), a.Token(), func() error { return nil })
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("guard accepted A's late write with fence %d after B's %d: %v", a.Fence(), b.Fence(), err)
	}
}
