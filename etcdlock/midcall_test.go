package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
)

// proxied returns a proxy in front of c's first member, closed at the
// end of the test.
func proxied(t *testing.T, c *etcdtest.Cluster) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New("", c.Members[0].ClientAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// keyCount counts the keys under prefix.
func keyCount(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// A grant whose put landed before Close revoked its lease, and whose reply
// came after Close took the handles, must not come back as a held lock:
// its key went with the lease, and another Locker may take it at once.
func TestCloseDuringGrantLosesIt(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := testCtx(t)
	admin := c.Client(t)
	p := proxied(t, c)
	l := newLocker(t, c.Client(t, "http://"+p.Addr))
	name := lockcheck.Key(t)
	warm, err := l.TryAcquire(ctx, name+"warm", 10*time.Second) // the session's lease
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	p.HoldReplies(true)
	got := make(chan *dlock.Lock, 1)
	go func() {
		lock, err := l.TryAcquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Logf("TryAcquire during Close: %v", err)
		}
		got <- lock
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error { // granted on the server
		if n, err := keyCount(ctx, admin, name+"/"); err != nil || n != 1 {
			return errors.New("the grant's key is not there yet")
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	lockcheck.Eventually(t, 5*time.Second, func() error { // revoked on the server
		if n, err := keyCount(ctx, admin, name+"/"); err != nil || n != 0 {
			return errors.New("the grant's key is still there")
		}
		return nil
	})
	p.HoldReplies(false)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	lock := <-got
	other, err := newLocker(t, c.Client(t)).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatalf("another Locker after Close: %v", err)
	}
	defer other.Release(ctx)
	if lock != nil && lock.Held() {
		t.Fatalf("the grant Close revoked is Held (valid until %v) while another Locker holds %q", lock.ValidUntil(), name)
	}
}

// The wait of dlock.Acquire on a semaphore ends at the caller's deadline
// even when the cluster answers nothing: the read that starts the watch
// of its slots is the caller's.
func TestSemaphoreWaitKeepsDeadlineWhenCutOff(t *testing.T) {
	c := etcdtest.Start(t, 1)
	p := proxied(t, c)
	l := newLocker(t, c.Client(t, "http://"+p.Addr))
	warm, err := dlock.Semaphore(l, 2).TryAcquire(testCtx(t), lockcheck.Key(t)+"warm", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := dlock.Acquire(ctx, dlock.Semaphore(l, 2), lockcheck.Key(t), 10*time.Second)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire cut off: %v, want DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		p.Reset()
		p.Blackhole(false)
		t.Fatalf("Acquire with a 500ms deadline still waits 10s later (it returned %v once the connections were reset)", <-done)
	}
	p.Blackhole(false)
}
