package etcdlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// waiterEnv, set to a cluster's endpoints, makes the test binary the
// waiting process of TestWaitResumedPastLease instead of running tests.
const waiterEnv = "ETCDLOCK_TEST_WAITER"

// runWaiter waits for the lock "paused" with a 2s TTL and up to 20s, and
// prints "OK fence" or "ERR error"; it is the child process of
// TestWaitResumedPastLease.
func runWaiter(endpoints []string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer cli.Close()
	l, err := etcdlock.New(cli)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lock, err := dlock.Acquire(ctx, l, "paused", 2*time.Second)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("OK", lock.Fence())
	lock.Release(context.Background())
	return 0
}

// TestWaitResumedPastLease: a waiting process paused past its lease (SIGSTOP)
// is resumed after the lease has expired but before the cluster has revoked
// it, with the lock free: the wait must not end with ErrNotHeld (the
// waiter never held the lock); it queues again with a new lease and gets
// the lock within its context.
func TestWaitResumedPastLease(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	holder, err := newLocker(t, c.Client(t)).TryAcquire(ctx, "paused", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterEnv+"="+strings.Join(c.Endpoints(), ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, admin, "paused", 2) })
	resp, err := admin.Get(ctx, "paused/", queueOrder()...)
	if err != nil {
		t.Fatal(err)
	}
	lease := clientv3.LeaseID(resp.Kvs[1].Lease)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The remaining TTL is given in whole seconds, rounded down: it turns 0
	// when less than a second is left.
	var lastSecond time.Time
	for lastSecond.IsZero() {
		ttl, err := admin.TimeToLive(ctx, lease)
		if err != nil || ttl.TTL < 0 {
			t.Fatalf("the waiter's lease ended before its last second was seen: %v %v", ttl, err)
		}
		if ttl.TTL == 0 {
			lastSecond = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Resume just after the expiry: the cluster revokes expired leases every
	// 500ms, so the waiter's key is most likely still there.
	time.Sleep(time.Until(lastSecond.Add(time.Second + 30*time.Millisecond)))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "OK") {
		t.Fatalf("the waiter resumed past its lease: %q, want OK and a lock", strings.TrimSpace(line))
	}
	t.Logf("the waiter resumed past its lease got the lock: %s", strings.TrimSpace(line))
}
