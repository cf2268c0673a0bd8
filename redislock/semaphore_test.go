package redislock_test

import (
	"context"
	"slices"
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
	"github.com/dlock-go/dlock/redislock"
)

// A permit costs one script call, whatever the limit and however many
// permits are held; the slot keys carry the name's hash tag, the permit's
// key expires on the server with the TTL, and the limit record beside them
// lives at least as long.
func TestSemaphoreOneRoundTrip(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	c := srv.Client(t)
	l := newLocker(t, c)
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	sem := dlock.Semaphore(l, 5)
	for range 2 { // loads the script, and leaves two permits held
		if _, err := sem.TryAcquire(ctx, name, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	sent := &countCalls{}
	c.AddHook(sent)
	lock, err := sem.TryAcquire(ctx, name, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := sent.names(); len(got) != 1 || got[0] != "evalsha" {
		t.Fatalf("one permit sent %q; want one EVALSHA", got)
	}
	if lock.Slot() != 2 || lock.Key() != "{"+name+"}#2" {
		t.Fatalf("permit on slot %d, key %q; want slot 2, {%s}#2", lock.Slot(), lock.Key(), name)
	}
	pttl := raw.PTTL(ctx, lock.Key()).Val()
	rec := keys.Limit(strings.TrimSuffix(lock.Key(), "2"))
	if pttl <= 0 || pttl > 3*time.Second || raw.PTTL(ctx, rec).Val() < 9*time.Second {
		t.Fatalf("permit's PTTL %v, record's %v; want at most 3s, and above 9s", pttl, raw.PTTL(ctx, rec).Val())
	}
	if got := raw.HGet(ctx, rec, "limit").Val(); got != "5" {
		t.Fatalf("recorded limit %q, want 5", got)
	}
}

// A holder that vanishes without releasing (its process killed): its
// permit comes back when the server expires its key, and a waiter gets it
// then, with a fence above the vanished holder's, though nobody released.
func TestSemaphoreVanishedHolder(t *testing.T) {
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	const ttl = 500 * time.Millisecond
	gone, err := dlock.Semaphore(newLocker(t, shared.Client(t)), 1).TryAcquire(ctx, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lock, err := dlock.Acquire(ctx, dlock.Semaphore(newLocker(t, shared.Client(t)), 1), name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	waited := time.Since(start)
	if waited < ttl/2 || waited > ttl+time.Second || lock.Slot() != 0 || lock.Fence() <= gone.Fence() {
		t.Fatalf("granted slot %d (fence %d, the vanished holder's %d) after %v; want slot 0, a higher fence, within the ttl %v and a second",
			lock.Slot(), lock.Fence(), gone.Fence(), waited, ttl)
	}
}

// SetLimit on a held semaphore: shrinking keeps the holders above the new
// limit and grants nothing until fewer than it are held, counting the
// slots above it; the old limit then conflicts.
func TestSemaphoreShrinkCountsHighSlots(t *testing.T) {
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	l := newLocker(t, shared.Client(t))
	var held []*dlock.Lock
	for range 4 {
		lock, err := dlock.Semaphore(l, 4).TryAcquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lock)
	}
	if err := dlock.SetLimit(ctx, l, name, 2); err != nil {
		t.Fatal(err)
	}
	_, err := dlock.Semaphore(l, 4).TryAcquire(ctx, name, time.Second)
	lockcheck.WantError(t, err, dlock.ErrInvalid)
	if !strings.Contains(err.Error(), "the server has 2, this Locker 4") {
		t.Fatalf("error %q does not say the limits", err)
	}
	// Slots 0 and 1 released: 2 and 3 are held above the limit of 2.
	for _, lock := range held[:2] {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = dlock.Semaphore(l, 2).TryAcquire(ctx, name, time.Second)
	lockcheck.WantError(t, err, dlock.ErrNotAcquired)
	for _, lock := range held[2:] {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := dlock.Semaphore(l, 2).TryAcquire(ctx, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	if lock.Key() != bridge.SlotKey(name, 0) {
		t.Fatalf("permit %q, want slot 0", lock.Key())
	}
}

// countCalls is a go-redis hook that records the commands a client sends.
type countCalls struct {
	mu    sync.Mutex
	calls []string
}

func (h *countCalls) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.calls = append(h.calls, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, cmd := range cmds {
			h.calls = append(h.calls, cmd.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Inspect lists a permit under its slot's key with the limit its
// semaphore recorded.
func TestSemaphoreInspect(t *testing.T) {
	ctx := testCtx(t)
	name := lockcheck.Key(t)
	l := newLocker(t, shared.Client(t), redislock.WithPrefix("p:"))
	lock, err := dlock.Semaphore(l, 3).TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	infos, err := l.Inspect(ctx, "{"+name+"}#*", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != lock.Key() || infos[0].Limit != 3 || infos[0].Fence != lock.Fence() {
		t.Fatalf("Inspect: %+v; want the permit on %q with limit 3 and fence %d", infos, lock.Key(), lock.Fence())
	}
}
