package redislock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// Inspect lists held locks with TTL, token, fence and waiters, skips keys
// without a TTL and dlock's own keys, and honours pattern and limit.
func TestInspectSingleNode(t *testing.T) {
	ctx := testCtx(t)
	c := shared.Client(t)
	l := newLocker(t, c, redislock.WithPrefix("insp1:"))
	var locks []*dlock.Lock
	for i := range 3 {
		lk, err := l.TryAcquire(ctx, fmt.Sprintf("job:%d", i), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	c.Set(ctx, "insp1:job:noexpiry", "x", 0) // not a lock: no TTL
	c.ZAdd(ctx, keys.Queue("insp1:job:1"), redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"})
	t.Cleanup(func() { c.Del(ctx, "insp1:job:noexpiry", keys.Queue("insp1:job:1")) })

	rows, err := l.Inspect(ctx, "job:*", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("Inspect: %d rows, want 3: %+v", len(rows), rows)
	}
	for i, r := range rows {
		if r.Key != fmt.Sprintf("job:%d", i) || r.Token != locks[i].Token() || r.Fence != locks[i].Fence() ||
			r.TTL <= 0 || r.TTL > 10*time.Second || !r.Majority || r.Node != shared.Addr {
			t.Errorf("row %d: %+v, want key job:%d token %s fence %d", i, r, i, locks[i].Token(), locks[i].Fence())
		}
	}
	if rows[1].Waiting != 2 || rows[0].Waiting != 0 {
		t.Errorf("Waiting: %d, %d; want 0, 2", rows[0].Waiting, rows[1].Waiting)
	}
	if rows, _ := l.Inspect(ctx, "job:*", 2); len(rows) != 2 {
		t.Errorf("limit 2: %d rows", len(rows))
	}
	if rows, _ := l.Inspect(ctx, "job:1", 0); len(rows) != 1 || rows[0].Key != "job:1" {
		t.Errorf("pattern job:1: %+v", rows)
	}
	locks[0].Release(ctx)
	if rows, _ := l.Inspect(ctx, "job:0", 0); len(rows) != 0 {
		t.Errorf("released job:0 still listed: %+v", rows)
	}
	if _, err := l.Inspect(ctx, "*", -1); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("limit -1: %v, want ErrInvalid", err)
	}
	// The same glob as on the other backends: an unclosed [ is refused.
	if _, err := l.Inspect(ctx, "job:[", 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("pattern job:[: %v, want ErrInvalid", err)
	}
}

func TestInspectUnreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	l := newLocker(t, c)
	_, err := l.Inspect(testCtx(t), "*", 0)
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrUnavailable) || !errors.As(err, &ne) {
		t.Fatalf("Inspect on a dead server: %v, want ErrUnavailable with a NodeError", err)
	}
}

// On a Cluster every master is scanned: keys spread over the slots are all
// listed, each with the master that holds it.
func TestInspectCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes a few seconds")
	}
	ctx := testCtx(t)
	addrs := testsrv.StartRedisCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	l := newLocker(t, c)
	const n = 30
	for i := range n {
		lk, err := l.TryAcquire(ctx, fmt.Sprintf("k%d", i), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lk.Release(ctx) })
	}
	rows, err := l.Inspect(ctx, "k*", 0)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]int{}
	for _, r := range rows {
		nodes[r.Node]++
	}
	if len(rows) != n || len(nodes) != 3 {
		t.Fatalf("Inspect: %d rows on %d nodes (%v), want %d on 3", len(rows), len(nodes), nodes, n)
	}
	if rows, _ := l.Inspect(ctx, "k*", 5); len(rows) != 5 {
		t.Errorf("limit 5: %d rows", len(rows))
	}
}
