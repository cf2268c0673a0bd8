package redlock_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/redlock"
)

// WithHolderInfo publishes the holder on every node that granted: Inspect
// shows it on each node's row, an extension gives it the new TTL, and the
// release deletes it everywhere; a refused attempt writes nothing over the
// holder's record.
func TestHolderInfo(t *testing.T) {
	ctx := testCtx(t)
	nodes := shared[:3]
	cs := clients(t, nodes)
	l := newLocker(t, nodes, redlock.WithHolderInfo("billing"))
	lk := mustAcquire(t, l, "rholder:a", 2*time.Second)
	rows, err := l.Inspect(ctx, "rholder:a", 0)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if len(rows) != len(nodes) {
		t.Fatalf("Inspect: %+v, want a row per node", rows)
	}
	for _, r := range rows {
		if !r.Majority || r.Host != host || r.PID != os.Getpid() || r.Service != "billing" || time.Since(r.Since) > time.Minute {
			t.Errorf("row %+v: want the majority's holder, host %s pid %d service billing", r, host, os.Getpid())
		}
	}
	before := cs[0].Get(ctx, keys.Holder("rholder:a")).Val()
	other := newLocker(t, nodes, redlock.WithHolderInfo("other"))
	if _, err := other.TryAcquire(ctx, "rholder:a", time.Second); err == nil {
		t.Fatal("second TryAcquire granted")
	}
	for i, c := range cs {
		if after := c.Get(ctx, keys.Holder("rholder:a")).Val(); after != before {
			t.Fatalf("node %d: a refused attempt rewrote the holder record: %s -> %s", i, before, after)
		}
	}
	if err := lk.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if ttl := c.PTTL(ctx, keys.Holder("rholder:a")).Val(); ttl < 20*time.Second {
			t.Fatalf("node %d: holder record's TTL %v after Extend(30s)", i, ttl)
		}
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l.Close() // the release's last nodes
	for i, c := range cs {
		if n := c.Exists(ctx, "rholder:a", keys.Holder("rholder:a")).Val(); n != 0 {
			t.Fatalf("node %d: %d keys left after Release", i, n)
		}
	}
	// Off by default: nothing beside the lock.
	lk = mustAcquire(t, newLocker(t, nodes), "rholder:b", time.Second)
	defer lk.Release(ctx)
	for i, c := range cs {
		if n := c.Exists(ctx, keys.Holder("rholder:b")).Val(); n != 0 {
			t.Fatalf("node %d: a holder record without WithHolderInfo", i)
		}
	}
}

// An attempt that a majority refused leaves no holder record on the node
// that granted it: the undo deletes it with the key.
func TestHolderInfoFailedAttempt(t *testing.T) {
	ctx := testCtx(t)
	nodes := shared[:3]
	cs := clients(t, nodes)
	for _, c := range cs[1:] {
		if err := c.Set(ctx, "rholder:f", "someone-else", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cs {
			c.Del(ctx, "rholder:f", keys.Fence("rholder:f"))
		}
	}()
	l := newLocker(t, nodes, redlock.WithHolderInfo("billing"))
	if _, err := l.TryAcquire(ctx, "rholder:f", 10*time.Second); err == nil {
		t.Fatal("TryAcquire granted against a majority of another owner's keys")
	}
	for i, c := range cs {
		if n := c.Exists(ctx, keys.Holder("rholder:f")).Val(); n != 0 {
			t.Fatalf("node %d: a holder record left by a failed attempt", i)
		}
	}
	if v := cs[0].Get(ctx, "rholder:f").Val(); v != "" {
		t.Fatalf("node 0: the failed attempt's key is still there: %q", v)
	}
}

// A lock that is never released (lost, or its holder gone) leaves a holder
// record that expires with it: written with the lock's TTL after the key,
// it is gone once the keys are.
func TestHolderInfoExpires(t *testing.T) {
	ctx := testCtx(t)
	nodes := shared[:3]
	cs := clients(t, nodes)
	l := newLocker(t, nodes, redlock.WithHolderInfo("billing"))
	const ttl = 400 * time.Millisecond
	// A new Locker's first attempt waits for every node's reply (it learns
	// their run_ids), so each node has granted and written its record.
	lk := mustAcquire(t, l, "rholder:e", ttl)
	for i, c := range cs {
		var key, holder *redis.DurationCmd
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			key, holder = p.PTTL(ctx, "rholder:e"), p.PTTL(ctx, keys.Holder("rholder:e"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if holder.Val() <= 0 || holder.Val() > key.Val()+time.Millisecond || holder.Val() > ttl {
			t.Fatalf("node %d: holder record's TTL %v, the lock key's %v: want within the lock's", i, holder.Val(), key.Val())
		}
	}
	// The lock's own validity is over before its keys expire; then the
	// records are gone within a millisecond of the keys (PX's resolution),
	// with margin for the machine.
	lockcheck.Eventually(t, ttl+5*time.Second, func() error {
		for i, c := range cs {
			if n := c.Exists(ctx, "rholder:e").Val(); n != 0 {
				return fmt.Errorf("node %d still holds the lock key", i)
			}
		}
		return nil
	})
	gone := time.Now()
	lockcheck.Eventually(t, 100*time.Millisecond, func() error {
		for i, c := range cs {
			if n := c.Exists(ctx, keys.Holder("rholder:e")).Val(); n != 0 {
				return fmt.Errorf("node %d: the holder record outlived the lock key by %v", i, time.Since(gone))
			}
		}
		return nil
	})
	if lk.Held() {
		t.Fatal("the handle still counts the lock as held after its keys expired")
	}
	if err := lk.Release(context.Background()); err == nil {
		t.Fatal("Release of an expired lock succeeded")
	}
}
