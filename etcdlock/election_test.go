package etcdlock_test

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/locktest"
)

func TestElection(t *testing.T) {
	c := etcdtest.Start(t, 3)
	admin := c.Client(t)
	locktest.RunElection(t, func(t *testing.T) dlock.Locker {
		return newLocker(t, c.Client(t))
	}, locktest.WithLapse(func(t *testing.T, key string) { revokeHolder(t, admin, key) }))
}

// Two candidates of one Locker wait for the same election: the keys they
// queue are the Locker's, taken in queue order by whichever asks first, and
// when a wait ends the Locker drops its youngest key. So when x, first in
// the queue, gives up, y leads on the key x queued with its identity: it
// publishes its own all the same.
func TestElectionTwoIdentitiesOneLocker(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := testCtx(t)
	l, other := newLocker(t, c.Client(t)), newLocker(t, c.Client(t))
	const name = "two-identities"
	holder, err := other.TryAcquire(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	xctx, giveUp := context.WithCancel(ctx)
	xDone := make(chan error, 1)
	go func() {
		xDone <- dlock.Lead(xctx, l, name, 5*time.Second, func(ctx context.Context) error {
			t.Error("x led after it gave up")
			return nil
		}, dlock.WithIdentity("x"), dlock.WithRetryDelay(20*time.Millisecond))
	}()
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, c.Client(t), name, 2) })
	yDone := make(chan error, 1)
	go func() {
		yDone <- dlock.Lead(ctx, l, name, 5*time.Second, func(ctx context.Context) error {
			term, _ := dlock.TermFromContext(ctx)
			got, err := dlock.Leader(ctx, other, name)
			if err != nil || got.Leader != "y" || got.Fence != term.Fence {
				t.Errorf("y leads in term %d; Leader reads %+v, %v", term.Fence, got, err)
			}
			return nil
		}, dlock.WithIdentity("y"), dlock.WithRetryDelay(20*time.Millisecond))
	}()
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, c.Client(t), name, 3) })
	giveUp()
	lockcheck.WantError(t, <-xDone, dlock.ErrNotAcquired, context.Canceled)
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, c.Client(t), name, 2) })
	resp, err := c.Client(t).Get(ctx, name+"/", queueOrder()...)
	if err != nil || len(resp.Kvs) != 2 || string(resp.Kvs[1].Value) != "x" {
		t.Fatalf("y waits on %v (%v), not on the key x queued", resp, err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-yDone; err != nil {
		t.Fatalf("Lead y: %v", err)
	}
}

// E2: a candidate whose wait's lease is revoked while it waits is neither a
// zombie (waiting forever on a key that is gone) nor a phantom leader (its
// key gone while it leads): it queues again on a new lease and leads when
// the leader resigns, on a key that exists; and a lease revoked while it
// leads ends its term at once.
func TestElectionDeadSession(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := testCtx(t)
	admin := c.Client(t)
	a, b := newLocker(t, c.Client(t)), newLocker(t, c.Client(t))
	const name = "dead-session"
	lockA, err := a.TryAcquire(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	led := make(chan dlock.Term, 4)
	lost := make(chan error, 4) // why each term ended
	done := make(chan error, 1)
	bctx, stop := context.WithCancel(ctx)
	defer func() { stop(); <-done }()
	go func() {
		done <- dlock.Lead(bctx, b, name, 5*time.Second, func(ctx context.Context) error {
			term, _ := dlock.TermFromContext(ctx)
			resp, err := admin.Get(ctx, name+"/", clientv3.WithFirstCreate()...)
			if err != nil || len(resp.Kvs) == 0 || uint64(resp.Kvs[0].CreateRevision) != term.Fence || string(resp.Kvs[0].Value) != "b" {
				t.Errorf("b leads in term %d, but the queue's first key is %v (%v)", term.Fence, resp, err)
			}
			led <- term
			<-ctx.Done()
			lost <- context.Cause(ctx)
			return nil
		}, dlock.WithIdentity("b"), dlock.WithRetryDelay(10*time.Second))
	}()
	// b's key is queued behind a's: revoke its lease.
	var waitKey *clientv3.GetResponse
	lockcheck.Eventually(t, 10*time.Second, func() error {
		waitKey, err = admin.Get(ctx, name+"/", append(queueOrder(), clientv3.WithLimit(2))...)
		if err == nil && len(waitKey.Kvs) < 2 {
			err = errors.New("b has not queued")
		}
		return err
	})
	if _, err := admin.Revoke(ctx, clientv3.LeaseID(waitKey.Kvs[1].Lease)); err != nil {
		t.Fatal(err)
	}
	// b queues again; then a resigns, and b leads.
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, admin, name, 2) })
	if err := lockA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var first dlock.Term
	select {
	case first = <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("b did not lead within 10s of a's release: a zombie campaign")
	}
	if first.Fence <= lockA.Fence() {
		t.Fatalf("b's term %d not above a's %d", first.Fence, lockA.Fence())
	}

	// Its lease revoked while it leads: the term ends with ErrLockLost
	// within the extension threshold, and b leads again on a new key.
	revoked := time.Now()
	revokeHolder(t, admin, name)
	select {
	case cause := <-lost:
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("b's term ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's term outlived its revoked lease by 10s: a phantom leader")
	}
	if d := time.Since(revoked); d > 3*time.Second {
		t.Errorf("b learned of its revoked lease after %v, ttl 5s, extension at half of it", d)
	}
	second := <-led
	if second.Fence <= first.Fence {
		t.Fatalf("b's new term %d not above %d", second.Fence, first.Fence)
	}
}

// etcdctlElect starts `etcdctl elect name proposal` (observe: `etcdctl
// elect -l name`); each leader it prints (a key line, then a value line)
// goes to leaders. Its stop function interrupts it.
func etcdctlElect(t *testing.T, c *etcdtest.Cluster, leaders chan<- [2]string, args ...string) (stop func()) {
	t.Helper()
	out, stop := etcdctl(t, c, append([]string{"elect"}, args...)...)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			key := sc.Text()
			if sc.Scan() {
				leaders <- [2]string{key, sc.Text()}
			}
		}
	}()
	return stop
}

// `etcdctl elect` and dlock.Lead on the same name form one election, both
// ways: each waits for the other's leader, each names the other's leader
// (Leader reads etcdctl's proposal and term; `etcdctl elect -l` prints
// dlock's identity), and each takes over when the other resigns.
func TestEtcdctlElectInterop(t *testing.T) {
	if _, err := exec.LookPath("etcdctl"); err != nil {
		t.Fatal("etcdctl not found on PATH; install it with: apt-get install -y etcd-client (or run `make test`, which does)")
	}
	c := etcdtest.Start(t, 3)
	ctx := testCtx(t)
	admin := c.Client(t)
	l := newLocker(t, c.Client(t))
	const name = "interop-elect"
	next := func(ch <-chan [2]string, what string) [2]string {
		t.Helper()
		select {
		case got := <-ch:
			return got
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing printed within 10s", what)
		}
		return [2]string{}
	}
	observed := make(chan [2]string, 10)
	etcdctlElect(t, c, observed, "-l", name)

	// etcdctl leads: dlock names it, waits, and leads when it resigns.
	won := make(chan [2]string, 1)
	resign := etcdctlElect(t, c, won, name, "from-etcdctl")
	elected := next(won, "etcdctl elect")
	if elected[1] != "from-etcdctl" || next(observed, "etcdctl elect -l") != elected {
		t.Fatalf("etcdctl elected %q", elected)
	}
	resp, err := admin.Get(ctx, elected[0])
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcdctl's leader key: %v, %v", resp, err)
	}
	term, err := dlock.Leader(ctx, l, name)
	if err != nil || term.Leader != "from-etcdctl" || term.Fence != uint64(resp.Kvs[0].CreateRevision) {
		t.Fatalf("dlock.Leader reads %+v, %v; want from-etcdctl in term %d", term, err, resp.Kvs[0].CreateRevision)
	}
	dlockLed := make(chan dlock.Term, 1)
	release := make(chan struct{})
	go func() {
		err := dlock.Lead(ctx, l, name, 5*time.Second, func(ctx context.Context) error {
			term, _ := dlock.TermFromContext(ctx)
			dlockLed <- term
			<-release
			return nil
		}, dlock.WithIdentity("from-dlock"))
		if err != nil {
			t.Errorf("Lead: %v", err)
		}
	}()
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, admin, name, 2) })
	select {
	case <-dlockLed:
		t.Fatal("dlock led while etcdctl did")
	default:
	}
	resign()
	ours := <-dlockLed
	if ours.Fence <= term.Fence {
		t.Fatalf("dlock's term %d not above etcdctl's %d", ours.Fence, term.Fence)
	}
	if got := next(observed, "etcdctl elect -l"); got[1] != "from-dlock" {
		t.Fatalf("etcdctl elect -l printed %q while dlock leads", got)
	}

	// dlock leads: etcdctl waits, and leads when dlock resigns.
	won2 := make(chan [2]string, 1)
	etcdctlElect(t, c, won2, name, "etcdctl-again")
	lockcheck.Eventually(t, 10*time.Second, func() error { return queueLen(ctx, admin, name, 2) })
	select {
	case got := <-won2:
		t.Fatalf("etcdctl was elected (%q) while dlock leads", got)
	default:
	}
	close(release)
	if got := next(won2, "etcdctl elect after dlock resigned"); got[1] != "etcdctl-again" {
		t.Fatalf("etcdctl elected %q", got)
	}
	if term, err := dlock.Leader(ctx, l, name); err != nil || term.Leader != "etcdctl-again" || term.Fence <= ours.Fence {
		t.Fatalf("dlock.Leader reads %+v, %v after dlock's term %d", term, err, ours.Fence)
	}
}
