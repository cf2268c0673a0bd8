package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// deadClient is a client for a loopback port where nothing listens: a node
// this client cannot reach (a partition seen from one side).
func deadClient(t *testing.T) redis.UniversalClient {
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return client(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// view builds a Locker that reaches only the servers whose index is in
// reach; the others are unreachable from it.
func view(t *testing.T, rs []*testsrv.Redis, reach []int, opts ...redlock.Option) *redlock.Locker {
	t.Helper()
	cs := make([]redis.UniversalClient, len(rs))
	for i := range cs {
		cs[i] = deadClient(t)
	}
	for _, i := range reach {
		cs[i] = client(t, rs[i].Addr)
	}
	opts = append([]redlock.Option{redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger())}, opts...)
	l, err := redlock.New(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func restart(t *testing.T, r *testsrv.Redis) {
	t.Helper()
	if err := r.Restart(); err != nil {
		t.Fatalf("restart %s: %v", r.Addr, err)
	}
}

// warm makes one acquisition with every node up, so that the nodes carry
// their markers (the cluster bootstrap) before a test takes some down.
func warm(t *testing.T, l *redlock.Locker) {
	t.Helper()
	lock := mustAcquire(t, l, "warm-up", time.Second)
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// F6: the lock works with 2 of 5 nodes down and is refused with 3 of 5,
// quickly, saying which node failed how, and leaving no key behind.
func TestMinorityAndMajorityDown(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	// A frozen node costs every round the whole node timeout, which comes
	// off the validity: keep it well below the TTLs used here.
	const timeout = 250 * time.Millisecond
	l := newLocker(t, rs, redlock.WithNodeTimeout(timeout))
	warm(t, l)
	key := lockcheck.Key(t)

	rs[3].Kill()
	rs[4].Pause() // frozen: requests hang until the node timeout
	defer rs[4].Resume()
	start := time.Now()
	lock, err := l.TryAcquire(testCtx(t), key, 5*time.Second)
	if err != nil {
		t.Fatalf("2 of 5 down: %v", err)
	}
	if r := lock.Remaining(); r <= 0 || r > 5*time.Second-time.Since(start)+time.Millisecond {
		t.Fatalf("validity %v not within ttl - elapsed", r)
	}
	if err := lock.Extend(testCtx(t), 5*time.Second); err != nil {
		t.Fatalf("extend with 2 of 5 down: %v", err)
	}
	err = dlock.Do(testCtx(t), l, key+":do", 1500*time.Millisecond, func(ctx context.Context) error {
		time.Sleep(1700 * time.Millisecond) // outlives the first TTL: needs an extension
		return context.Cause(ctx)
	})
	if err != nil {
		t.Fatalf("Do with 2 of 5 down: %v", err)
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatalf("release with 2 of 5 down: %v", err)
	}

	rs[2].Kill()
	start = time.Now()
	_, err = l.TryAcquire(testCtx(t), key, 5*time.Second)
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("3 of 5 down: got %v, want ErrUnavailable only", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Got != 2 || qe.Need != 3 || len(qe.Nodes) != 5 {
		t.Fatalf("3 of 5 down: no QuorumError{Got 2, Need 3, 5 nodes} in %v", err)
	}
	for i, n := range qe.Nodes {
		if down := i >= 2; down == (n.Err == nil) || n.Node != rs[i].Addr {
			t.Errorf("node %d: %+v; want an error exactly for the down nodes", i, n)
		}
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Node != rs[2].Addr {
		t.Fatalf("errors.As(*dlock.NodeError) = %v, want node %s first", ne, rs[2].Addr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a node timeout reads as the caller's deadline: %v", err)
	}
	if took > 2*timeout+500*time.Millisecond {
		t.Fatalf("refusal took %v, want about one node timeout (%v)", took, timeout)
	}
	if ks := keysOn(t, rs[:2], key); len(ks) != 0 {
		t.Fatalf("refused acquisition left keys on reachable nodes: %v", ks)
	}
}

// F14 for Redlock: when a majority stops answering during Do, the function's
// context is cancelled with ErrLockLost by the validity deadline.
func TestDoLosesMajority(t *testing.T) {
	rs := testsrv.StartRedisN(t, 5)
	l := newLocker(t, rs)
	warm(t, l)
	const ttl = 600 * time.Millisecond
	var lostAt, deadline time.Time
	err := dlock.Do(testCtx(t), l, lockcheck.Key(t), ttl, func(ctx context.Context) error {
		deadline = dlock.LockFromContext(ctx).ValidUntil()
		for _, r := range rs[:3] {
			r.Pause()
		}
		defer func() {
			for _, r := range rs[:3] {
				r.Resume()
			}
		}()
		select {
		case <-ctx.Done():
			lostAt = time.Now()
		case <-time.After(5 * ttl):
			t.Error("not cancelled within 5 TTLs of losing the majority")
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: got %v, want ErrLockLost", err)
	}
	if late := lostAt.Sub(deadline); late > 150*time.Millisecond {
		t.Fatalf("loss signalled %v after the validity deadline", late)
	}
}

// A node restarted empty during a hold. Holder A reached only nodes 0-2
// (3 and 4 were cut off from it); node 2 then restarts without its data. If
// it comes back at once, B wins {2,3,4} while A still holds: a double grant
// (the negative control; the fence still rises, so a guard rejects A). If
// it stays down until A's TTL has passed, nobody else gets the lock before
// A's validity ends.
func TestNodeRestartDuringHold(t *testing.T) {
	const ttl = time.Second
	for _, delayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("delayed=%v", delayed), func(t *testing.T) {
			rs := testsrv.StartRedisN(t, 5)
			b := newLocker(t, rs)
			warm(t, b)
			a := view(t, rs, []int{0, 1, 2})
			key := lockcheck.Key(t)
			la := mustAcquire(t, a, key, ttl)

			rs[2].Kill()
			if delayed {
				// Delayed restart: try B all along while node 2 is down.
				for time.Now().Before(la.ValidUntil()) {
					if lb, err := b.TryAcquire(testCtx(t), key, ttl); err == nil {
						t.Fatalf("B acquired (fence %d) at %v before A's validity ended", lb.Fence(), time.Until(la.ValidUntil()))
					}
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(ttl - time.Until(la.ValidUntil()) + 100*time.Millisecond) // past the server TTL
			}
			restart(t, rs[2])
			lb, err := b.TryAcquire(testCtx(t), key, ttl)
			if err != nil {
				t.Fatalf("B after node 2 came back: %v", err)
			}
			defer lb.Release(testCtx(t))
			overlap := la.Held()
			if overlap == delayed {
				t.Fatalf("delayed restart %v: A still held when B acquired: %v", delayed, overlap)
			}
			if lb.Fence() <= la.Fence() {
				t.Fatalf("B's fence %d not above A's %d", lb.Fence(), la.Fence())
			}
			if !delayed {
				t.Logf("immediate restart: double grant, as expected without the delay (A fence %d, B fence %d)", la.Fence(), lb.Fence())
			}
		})
	}
}

// F21: a context cancelled at any moment of an acquisition leaves no key on
// any node (the attempt is undone, or the lock it returned is released).
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	l := newLocker(t, shared)
	key := lockcheck.Key(t)
	got := 0
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%40)*100*time.Microsecond)
		lock, err := l.TryAcquire(ctx, key, 10*time.Second)
		cancel()
		if err == nil {
			got++
			if err := lock.Release(testCtx(t)); err != nil {
				t.Fatalf("release: %v", err)
			}
		} else if !errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("cancelled acquisition: %v", err)
		}
		if err == nil {
			// A release returns once a majority deleted; the rest follow
			// within the node timeout.
			waitNoKeys(t, shared, key, time.Second)
		} else if ks := keysOn(t, shared, key); len(ks) != 0 {
			t.Fatalf("attempt %d (%v) left keys: %v", i, err, ks)
		}
	}
	t.Logf("%d of 200 attempts won before their context ended", got)
}

// A replica is not a node: it refuses the script's writes (READONLY), so it
// counts as refusing and the error says so (two replicas of three leave no
// majority: ErrMisconfigured); the two masters are a majority of three and
// grant the lock on their own.
func TestReplicaCountsAsFailed(t *testing.T) {
	rs := testsrv.StartRedisN(t, 2)
	port := strconv.Itoa(rs[0].Port)
	r1 := testsrv.StartRedis(t, testsrv.RedisArgs("--replicaof", "127.0.0.1", port))
	r2 := testsrv.StartRedis(t, testsrv.RedisArgs("--replicaof", "127.0.0.1", port))
	key := lockcheck.Key(t)
	_, err := newLocker(t, []*testsrv.Redis{rs[0], r1, r2}).TryAcquire(testCtx(t), key, 10*time.Second)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Nodes[1].Err == nil || !strings.Contains(qe.Nodes[1].Err.Error(), "READONLY") {
		t.Fatalf("one master, two replicas: got %v, want a QuorumError with READONLY from the replicas", err)
	}
	if !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("one master, two replicas: got %v, want ErrMisconfigured", err)
	}
	lock := mustAcquire(t, newLocker(t, []*testsrv.Redis{rs[0], rs[1], r1}), key, 10*time.Second)
	lock.Release(testCtx(t))
}
