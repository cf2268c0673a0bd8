package etcdlock_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestMutexInterop: concurrency.Mutex and a Locker on the same name exclude
// each other, and a waiter of either kind gets the lock when the other
// releases it.
func TestMutexInterop(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	sess, err := concurrency.NewSession(c.Client(t), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const name = "interop-mutex"
	m := concurrency.NewMutex(sess, name)

	// Mutex holds; the Locker is refused, then waits and wins on unlock.
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = l.TryAcquire(ctx, name, 5*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	got := make(chan *dlock.Lock, 1)
	go func() {
		lock, err := dlock.Acquire(ctx, l, name, 5*time.Second)
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		got <- lock
	}()
	select {
	case <-got:
		t.Fatal("Locker got the lock while the Mutex held it")
	case <-time.After(500 * time.Millisecond):
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lock := <-got
	if lock == nil {
		t.FailNow()
	}

	// Locker holds; the Mutex is refused, then waits and wins on release.
	if err := m.TryLock(ctx); err != concurrency.ErrLocked {
		t.Fatalf("Mutex.TryLock while the Locker holds: %v, want ErrLocked", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	select {
	case err := <-locked:
		t.Fatalf("Mutex got the lock while the Locker held it (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("Mutex.Lock after release: %v", err)
	}
	if m.Header().Revision == 0 || uint64(m.Header().Revision) <= lock.Fence() {
		t.Fatalf("Mutex's revision %d not above the Locker's fence %d", m.Header().Revision, lock.Fence())
	}
	_ = m.Unlock(ctx)
}

// etcdctlLock starts `etcdctl lock name` and waits until it prints that it
// holds the lock; it returns a function that makes it release (SIGINT).
func etcdctlLock(t *testing.T, c *etcdtest.Cluster, name string, held chan<- struct{}) (release func()) {
	t.Helper()
	out, release := etcdctl(t, c, "lock", name)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() && strings.HasPrefix(sc.Text(), name+"/") {
			close(held)
		}
		for sc.Scan() {
		}
	}()
	return release
}

// etcdctl starts etcdctl with args against c, and returns its standard
// output and the function that interrupts it (SIGINT) and waits for it.
func etcdctl(t *testing.T, c *etcdtest.Cluster, args ...string) (io.Reader, func()) {
	t.Helper()
	cmd := exec.Command("etcdctl", append([]string{"--endpoints", strings.Join(c.Endpoints(), ",")}, args...)...)
	cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcdctl: %v", err)
	}
	done := false
	stop := func() {
		if !done {
			done = true
			_ = cmd.Process.Signal(syscall.SIGINT)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return out, stop
}

// TestEtcdctlInterop: `etcdctl lock` and a Locker on the same name exclude
// each other, in both directions.
func TestEtcdctlInterop(t *testing.T) {
	if _, err := exec.LookPath("etcdctl"); err != nil {
		t.Fatal("etcdctl not found on PATH; install it with: apt-get install -y etcd-client (or run `make test`, which does)")
	}
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	l := newLocker(t, c.Client(t))
	const name = "interop-etcdctl"

	held := make(chan struct{})
	release := etcdctlLock(t, c, name, held)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("etcdctl lock did not get the free lock")
	}
	_, err := l.TryAcquire(ctx, name, 5*time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	got := make(chan *dlock.Lock, 1)
	go func() {
		lock, err := dlock.Acquire(ctx, l, name, 5*time.Second)
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		got <- lock
	}()
	select {
	case <-got:
		t.Fatal("Locker got the lock while etcdctl held it")
	case <-time.After(500 * time.Millisecond):
	}
	release()
	lock := <-got
	if lock == nil {
		t.FailNow()
	}

	held2 := make(chan struct{})
	release2 := etcdctlLock(t, c, name, held2)
	select {
	case <-held2:
		t.Fatal("etcdctl got the lock while the Locker held it")
	case <-time.After(time.Second):
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held2:
	case <-ctx.Done():
		t.Fatal("waiting etcdctl lock did not get the lock after the release")
	}
	release2()
}
