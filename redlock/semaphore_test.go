package redlock_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// A Redlock permit is a majority of nodes on one slot, so the limit holds
// by construction, whatever the nodes each grant reached. The state: 3
// nodes, a semaphore of 2; holder A's grant reached nodes 0 and 1 (node 2
// was cut off from A), holder B's nodes 1 and 2 (node 0 cut off from B).
// A third holder C, which reaches every node, must be refused: every slot
// has a majority of nodes held by A or B.
//
// The negative control counts holders per node (a set per node, as
// semaphores that keep a per-node count and admit on a majority of counts
// do): under the same partitions A is counted on {0,1}, B on {1,2}, and C
// finds nodes 0 and 2 below the limit, a majority: three holders of a
// semaphore of 2.
func TestSemaphoreMajorityOnOneSlot(t *testing.T) {
	nodes := testsrv.StartRedisN(t, 3)
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	const limit = 2
	all := []int{0, 1, 2}
	reach := map[string][]int{"A": {0, 1}, "B": {1, 2}, "C": all}

	// Per-node counting: a holder is admitted where fewer than the limit
	// are counted, and holds the permit with a majority of admissions.
	admit := redis.NewScript(`if redis.call('scard', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
return redis.call('sadd', KEYS[1], ARGV[1])`)
	raw := clients(t, nodes)
	var counted []string
	for _, h := range []string{"A", "B", "C"} {
		yes := 0
		for _, i := range reach[h] {
			if n, err := admit.Run(ctx, raw[i], []string{"count:{" + name + "}"}, h, limit).Int(); err != nil {
				t.Fatal(err)
			} else {
				yes += n
			}
		}
		if yes >= 2 {
			counted = append(counted, h)
		}
	}
	if len(counted) <= limit {
		t.Fatalf("the per-node count admitted %v: the control should over-admit", counted)
	}
	t.Logf("per-node counting admitted %v to a semaphore of %d", counted, limit)

	// dlock's Redlock permits, each Locker reaching the nodes it may.
	dead := deadAddr(t)
	locker := func(reach []int) dlock.Locker {
		cs := make([]redis.UniversalClient, 3)
		for i := range cs {
			cs[i] = client(t, dead)
		}
		for _, i := range reach {
			cs[i] = client(t, nodes[i].Addr)
		}
		l, err := redlock.New(cs, redlock.WithNodeTimeout(time.Second), redlock.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		return dlock.Semaphore(l, limit)
	}
	var held []string
	for _, h := range []string{"A", "B", "C"} {
		lock, err := locker(reach[h]).TryAcquire(ctx, name, 10*time.Second)
		switch {
		case err == nil:
			held = append(held, h)
			defer lock.Release(context.WithoutCancel(ctx))
		case !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("%s: %v", h, err)
		}
	}
	if len(held) != limit || held[0] != "A" || held[1] != "B" {
		t.Fatalf("Redlock permits granted to %v; want A and B only", held)
	}
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
