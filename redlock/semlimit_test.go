package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// limitRecord returns the semaphore name's limit record on every node:
// its limit ("" when there is none) and its PTTL.
func limitRecord(t *testing.T, rs []*testsrv.Redis, name string) (limits []string, pttls []time.Duration) {
	t.Helper()
	rec := keys.Limit(bridge.SlotPrefix(name))
	for _, c := range clients(t, rs) {
		v, err := c.HGet(context.Background(), rec, "limit").Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("HGET %s: %v", rec, err)
		}
		d, err := c.PTTL(context.Background(), rec).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", rec, err)
		}
		limits, pttls = append(limits, v), append(pttls, d)
	}
	return limits, pttls
}

// wantConflict fails unless err is a limit conflict naming the server's
// limit and the Locker's.
func wantConflict(t *testing.T, err error, server, ours int) {
	t.Helper()
	want := fmt.Sprintf("limit conflict: the server has %d, this Locker %d", server, ours)
	if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("got %v, want ErrInvalid saying %q", err, want)
	}
}

// The first grant records the limit on every node, beside the slots, with
// the permit's TTL; a Locker with another limit is refused with the
// server's limit, also when it waits, and its attempt leaves no slot key.
func TestSemaphoreLimitRecorded(t *testing.T) {
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	ttl := 10 * time.Second
	a, b := newLocker(t, shared), newLocker(t, shared)
	permit := mustAcquire(t, dlock.Semaphore(a, 2), name, ttl)
	limits, pttls := limitRecord(t, shared, name)
	for i := range limits {
		if limits[i] != "2" || pttls[i] <= 0 || pttls[i] > ttl {
			t.Fatalf("node %d: limit record %q with PTTL %v, want 2 with a PTTL in (0, %v]", i, limits[i], pttls[i], ttl)
		}
	}
	rows, err := a.Inspect(ctx, bridge.SlotPrefix(name)+"*", 0)
	if err != nil || len(rows) != len(shared) {
		t.Fatalf("Inspect: %v, %+v; want a row per node", err, rows)
	}
	for _, r := range rows {
		if r.Key != permit.Key() || r.Limit != 2 || !r.Majority {
			t.Fatalf("Inspect row %+v, want the permit's key with limit 2 and a majority", r)
		}
	}
	_, err = dlock.Semaphore(b, 3).TryAcquire(ctx, name, ttl)
	wantConflict(t, err, 2, 3)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = dlock.Acquire(wctx, dlock.Semaphore(b, 3), name, ttl)
	wantConflict(t, err, 2, 3)
	if wctx.Err() != nil {
		t.Fatal("the wait with a conflicting limit ran to its deadline")
	}
	for addr, ks := range keysOn(t, shared, bridge.SlotPrefix(name)+"*") {
		if len(ks) != 1 || ks[0] != permit.Key() {
			t.Fatalf("node %s holds %v, want only the permit's %s", addr, ks, permit.Key())
		}
	}
}

// A node whose record conflicts is one refusal among others: with the
// rest a majority, the permit is granted; when the conflicting nodes are
// so many that no majority can grant, the attempt fails at once with the
// server's limit, and the slot it took on the other nodes is released.
func TestSemaphoreConflictNeedsEnoughNodes(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	ctx := testCtx(t)
	raw := clients(t, rs)
	l := newLocker(t, rs)
	// plant puts a permit of another Locker on slot 4 of name, with a limit
	// record of 7, on the nodes given.
	plant := func(name string, nodes ...int) {
		sem := bridge.SlotPrefix(name)
		for _, i := range nodes {
			if err := raw[i].Set(ctx, sem+"4", "other", 10*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			if err := raw[i].HSet(ctx, keys.Limit(sem), "limit", 7, "span", 7).Err(); err != nil {
				t.Fatal(err)
			}
			raw[i].PExpire(ctx, keys.Limit(sem), 10*time.Second)
		}
	}

	minority := lockcheck.Key(t)
	plant(minority, 0)
	permit, err := dlock.Semaphore(l, 2).TryAcquire(ctx, minority, 10*time.Second)
	if err != nil {
		t.Fatalf("one node of three conflicting blocked the permit: %v", err)
	}
	defer permit.Release(context.WithoutCancel(ctx))

	majority := lockcheck.Key(t)
	plant(majority, 0, 1)
	_, err = dlock.Semaphore(l, 2).TryAcquire(ctx, majority, 10*time.Second)
	wantConflict(t, err, 7, 2)
	if n, err := raw[2].Exists(ctx, bridge.SlotKey(majority, 0)).Result(); err != nil || n != 0 {
		t.Fatalf("the slot the failed attempt took on node 2 is still there (%d, %v)", n, err)
	}
}

// Shrinking the limit lets the holders keep their permits; a new permit
// waits until no permit above the new limit is held, even where each
// node sees fewer permits than the new limit. The state: 3 nodes, a
// semaphore of 3, holder P1 on slot 1 through nodes 0 and 1, holder P2 on
// slot 2 through nodes 1 and 2, slot 0 free after a shrink to 2. Two
// permits are held: no new one may be granted. Node 0 sees one permit and
// node 2 one, a majority below the new limit; node 2 refuses because it
// holds slot 2, above the new limit.
func TestSemaphoreShrinkAcrossNodes(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	const ttl = 10 * time.Second
	dead := deadAddr(t)
	reaching := func(nodes ...int) *redlock.Locker {
		cs := make([]redis.UniversalClient, 3)
		for i := range cs {
			cs[i] = client(t, dead)
		}
		for _, i := range nodes {
			cs[i] = client(t, rs[i].Addr)
		}
		l, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	all := newLocker(t, rs)
	p0 := mustAcquire(t, dlock.Semaphore(all, 3), name, ttl)
	p1 := mustAcquire(t, dlock.Semaphore(reaching(0, 1), 3), name, ttl)
	p2 := mustAcquire(t, dlock.Semaphore(reaching(1, 2), 3), name, ttl)
	if p0.Slot() != 0 || p1.Slot() != 1 || p2.Slot() != 2 {
		t.Fatalf("permits on slots %d, %d, %d; want 0, 1, 2", p0.Slot(), p1.Slot(), p2.Slot())
	}
	if err := dlock.SetLimit(ctx, all, name, 2); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	if err := p0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*dlock.Lock{p1, p2} {
		if err := p.Extend(ctx, ttl); err != nil {
			t.Fatalf("the holder of slot %d lost its permit to the smaller limit: %v", p.Slot(), err)
		}
	}
	if p, err := dlock.Semaphore(newLocker(t, rs), 2).TryAcquire(ctx, name, ttl); err == nil {
		t.Fatalf("a third permit (slot %d) granted while two are held, limit 2", p.Slot())
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := dlock.Semaphore(newLocker(t, rs), 2).TryAcquire(ctx, name, ttl); err == nil {
		t.Fatalf("a permit (slot %d) granted while slot 2, above the new limit, is held", p.Slot())
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, dlock.Semaphore(newLocker(t, rs), 2), name, ttl)
}

// With one node of three stopped (killed) or paused (SIGSTOP), grants,
// SetLimit and conflicts work with the majority left.
func TestSemaphoreLimitNodeDown(t *testing.T) {
	for _, fault := range []string{"stopped", "paused"} {
		t.Run(fault, func(t *testing.T) {
			rs := testsrv.StartRedisN(t, 3)
			ctx := testCtx(t)
			name := lockcheck.Key(t)
			if fault == "stopped" {
				rs[2].Stop()
			} else {
				rs[2].Pause()
				defer rs[2].Resume()
			}
			l := newLocker(t, rs)
			p := mustAcquire(t, dlock.Semaphore(l, 2), name, 10*time.Second)
			if err := dlock.SetLimit(ctx, l, name, 3); err != nil {
				t.Fatalf("SetLimit with 2 of 3 nodes: %v", err)
			}
			limits, _ := limitRecord(t, rs[:2], name)
			if limits[0] != "3" || limits[1] != "3" {
				t.Fatalf("limit records %v after SetLimit(3)", limits)
			}
			_, err := dlock.Semaphore(newLocker(t, rs), 2).TryAcquire(ctx, name, 10*time.Second)
			wantConflict(t, err, 3, 2)
			if q := mustAcquire(t, dlock.Semaphore(newLocker(t, rs), 3), name, 10*time.Second); q.Slot() == p.Slot() {
				t.Fatalf("two permits on slot %d", p.Slot())
			}
		})
	}
}

// Lockers with different limits racing for an empty semaphore: whoever
// holds permits at one instant holds them under one limit, never more
// than it, and never two on one slot; the others are refused.
func TestSemaphoreConcurrentLimits(t *testing.T) {
	ctx := testCtx(t)
	for round := range 3 {
		name := lockcheck.Key(t)
		var mu sync.Mutex
		held := map[int][]*dlock.Lock{} // by limit
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 12 {
			limit := 2 + i%2
			l := newLocker(t, shared, redlock.WithNodeTimeout(5*time.Second)) // 60 fresh connections at once
			wg.Go(func() {
				<-start
				p, err := dlock.Semaphore(l, limit).TryAcquire(ctx, name, 20*time.Second)
				if err != nil {
					if !errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, dlock.ErrInvalid) {
						t.Errorf("limit %d: %v", limit, err)
					}
					return
				}
				mu.Lock()
				held[limit] = append(held[limit], p)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		slots := map[int]bool{}
		for limit, ps := range held {
			for _, p := range ps {
				if slots[p.Slot()] {
					t.Errorf("round %d: two permits on slot %d", round, p.Slot())
				}
				slots[p.Slot()] = true
				defer p.Release(context.WithoutCancel(ctx))
			}
			if len(ps) > limit {
				t.Errorf("round %d: %d permits under limit %d", round, len(ps), limit)
			}
		}
		if len(held) > 1 {
			t.Errorf("round %d: permits held under limit 2 (%d) and 3 (%d) at once", round, len(held[2]), len(held[3]))
		}
		t.Logf("round %d: permits held %v", round, map[int]int{2: len(held[2]), 3: len(held[3])})
	}
}

// An attempt cancelled while its request is in flight leaves nothing that
// outlives the permit's TTL: the slot it took on the node that answered is
// released before TryAcquire returns, and what the paused nodes run after
// it gave up (their requests sat in their sockets) expires with the TTL,
// limit record included.
func TestSemaphoreCancelLeavesNothing(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	name := lockcheck.Key(t)
	const ttl = 3 * time.Second
	l := newLocker(t, rs, redlock.WithNodeTimeout(time.Second))
	// Warm: the Locker knows the nodes, so the attempt's script itself is
	// what waits in the paused nodes' sockets.
	if err := mustAcquire(t, dlock.Semaphore(l, 2), lockcheck.Key(t), ttl).Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	rs[1].Pause()
	rs[2].Pause()
	defer rs[1].Resume()
	defer rs[2].Resume()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := dlock.Semaphore(l, 2).TryAcquire(ctx, name, ttl)
		done <- err
	}()
	raw := rs[0].Client(t)
	slot0 := bridge.SlotKey(name, 0)
	for n := int64(0); n == 0; {
		var err error
		if n, err = raw.Exists(testCtx(t), slot0).Result(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // polls a state that no event announces
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) { // after a node timeout: the undo waits for the paused nodes
		t.Fatalf("TryAcquire cancelled mid-attempt: %v, want context.Canceled", err)
	}
	if n, err := raw.Exists(testCtx(t), slot0).Result(); err != nil || n != 0 {
		t.Fatalf("the slot taken on the node that answered is still there after TryAcquire returned (%d, %v)", n, err)
	}
	resumed := time.Now()
	rs[1].Resume() // the attempt's scripts may run now, after it gave up
	rs[2].Resume()
	for {
		left := keysOn(t, rs, bridge.SlotPrefix(name)+"*")
		for k, v := range keysOn(t, rs, keys.Limit(bridge.SlotPrefix(name))) {
			left[k] = append(left[k], v...)
		}
		if len(left) == 0 {
			break
		}
		if time.Since(resumed) > ttl+2*time.Second {
			t.Fatalf("keys left %v after the cancelled attempt, beyond its TTL %v", time.Since(resumed), left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
