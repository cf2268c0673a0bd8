package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// Fences stay monotonic across 1,000 successive holders while the server,
// which persists nothing, restarts empty (at once, and after the TTL) and
// comes back from an old snapshot: a counter that is lost, or older than
// the fences it handed out, is below the server's clock, and every grant
// draws at least the clock.
func TestFencesSurviveRestarts(t *testing.T) {
	srv := testsrv.StartRedis(t)
	l := newLocker(t, srv.Client(t))
	raw := srv.Client(t)
	restart := func() {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	faults := map[int]func(){
		200: restart,
		400: func() { srv.Kill(); time.Sleep(2 * time.Second); restart() }, // after the TTL
		500: func() { // a snapshot of now, restored at 800
			if err := raw.Save(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		},
		800: restart, // loads the snapshot: the counter of holder 500
	}
	f := lockcheck.FenceHistory(t, l, lockcheck.Key(t), 1000, faults)
	t.Logf("fences %d .. %d", f[0], f[len(f)-1])
}

// The clock rule's assumption, shown failing: a server whose clock steps
// back further than the time its lost counter took to come back hands out a
// fence below an earlier one. The guard at the resource still rejects the
// stale holder's writes.
func TestFenceInversionWhenClockStepsBack(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	a := newLocker(t, srv.Client(t))
	key := lockcheck.Key(t)
	guard := fence.NewMemory()

	// While the counter lives, a clock that steps back changes nothing: the
	// counter is ahead of it, and the next fence is one more.
	l0, err := a.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l0.Release(testCtx(t))
	behind := newLocker(t, srv.Client(t))
	behind.SetClockOffset(-10_000_000)
	for _, l := range []*redislock.Locker{behind, a} {
		lb, err := l.TryAcquire(testCtx(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if lb.Fence() <= l0.Fence() {
			t.Fatalf("with the counter kept and the clock 10s behind, fence %d is not above %d", lb.Fence(), l0.Fence())
		}
		l0 = lb
		lb.Release(testCtx(t))
	}

	la, err := behind.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if la.Fence() != l0.Fence()+1 {
		t.Fatalf("fence %d after %d with the clock behind the counter, want one more", la.Fence(), l0.Fence())
	}
	if err := guard.Write("ledger", la.Fence(), la.Token(), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	// The server restarts empty (lock and counter lost) with its clock 10s
	// behind: B's fence comes from that clock.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, srv.Client(t))
	b.SetClockOffset(-10_000_000)
	lb, err := b.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Fence() >= la.Fence() {
		t.Fatalf("B's fence %d is not below A's %d: the stepped-back clock did not show", lb.Fence(), la.Fence())
	}
	t.Logf("inversion: A's fence %d, B's fence %d after the clock stepped back 10s", la.Fence(), lb.Fence())
	err = guard.Write("ledger", lb.Fence(), lb.Token(), func() error { t.Error("B's stale write ran"); return nil })
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("guard: B's write with fence %d after A's %d: %v, want fence.ErrStale", lb.Fence(), la.Fence(), err)
	}

	// The same clock with the counter kept: the counter, not the clock,
	// carries the fence on.
	lb.Release(testCtx(t))
	lc, err := b.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Release(testCtx(t))
	if lc.Fence() <= lb.Fence() {
		t.Fatalf("with the counter kept, C's fence %d is not above B's %d", lc.Fence(), lb.Fence())
	}
	if raw.Exists(testCtx(t), keys.Fence(key)).Val() != 1 {
		t.Fatal("no fence counter")
	}
}

// After locks on many distinct names are taken and released, nothing of
// dlock's stays on the server once the fence TTL has passed.
func TestNoResidue(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	const ttl = 500 * time.Millisecond
	l := newLocker(t, srv.Client(t), redislock.WithFenceTTL(ttl))
	const n = 2000
	for i := range n {
		lock, err := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if got := raw.DBSize(testCtx(t)).Val(); got != 2 {
				t.Fatalf("%d keys on the server while one lock is held, want 2 (the lock and its fence counter)", got)
			}
		}
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := raw.DBSize(testCtx(t)).Val(); got == 0 || got > n {
		t.Fatalf("%d keys right after %d locks were released, want their %d fence counters", got, n, n)
	}
	lockcheck.Eventually(t, ttl+5*time.Second, func() error {
		if n := raw.DBSize(testCtx(t)).Val(); n != 0 {
			return fmt.Errorf("%d keys left after the fence TTL of %v, such as %q", n, ttl, raw.RandomKey(testCtx(t)).Val())
		}
		return nil
	})
}

// Lock names cannot reach dlock's own keys: every entry point rejects a
// name in the "dlock:" namespace before sending anything, so a release "by
// token" cannot delete another key's fence counter.
func TestReservedNamespace(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t))
	key := lockcheck.Key(t)
	lock, err := l.TryAcquire(testCtx(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lock.Release(testCtx(t))
	counter := keys.Fence(key)
	before := raw.Get(testCtx(t), counter).Val()
	for name, err := range map[string]error{
		"TryAcquire":   func() error { _, err := l.TryAcquire(testCtx(t), counter, time.Minute); return err }(),
		"Acquire":      func() error { _, err := dlock.Acquire(testCtx(t), l, "dlock:waiters:{x}", time.Minute); return err }(),
		"ReleaseToken": l.ReleaseToken(testCtx(t), counter, before),
		"ExtendToken":  l.ExtendToken(testCtx(t), counter, before, time.Minute),
		"WithPrefix":   func() error { _, err := redislock.New(shared.Client(t), redislock.WithPrefix("dlock:x:")); return err }(),
		"prefix+key": func() error {
			_, err := newLocker(t, shared.Client(t), redislock.WithPrefix("dl")).TryAcquire(testCtx(t), "ock:fence:{x}", time.Minute)
			return err
		}(),
	} {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s in dlock's namespace: %v, want ErrInvalid", name, err)
		}
	}
	if after := raw.Get(testCtx(t), counter).Val(); after != before {
		t.Fatalf("fence counter changed from %q to %q", before, after)
	}
	if ttl := raw.PTTL(testCtx(t), counter).Val(); ttl < 30*time.Minute {
		t.Fatalf("fence counter's TTL is %v, want the fence TTL's hour", ttl)
	}
}

// An attempt that fails on an error reply takes nothing: an ACL that allows
// the lock key but not dlock's own keys (NOPERM on the fence counter), or a
// fence counter of the wrong type. The caller gets the server's reply
// (errors.As finds the redis.Error), not a report of an unreachable server,
// and the lock key is not left behind for its TTL.
func TestFailedAttemptTakesNothing(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	if err := raw.Do(testCtx(t), "ACL", "SETUSER", "app", "on", ">pw", "~locks:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = "app", "pw"
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	l := newLocker(t, c)

	check := func(l *redislock.Locker, what, key, reply string) {
		t.Helper()
		_, err := l.TryAcquire(testCtx(t), key, time.Minute)
		var re redis.Error
		switch {
		case err == nil:
			t.Fatalf("%s: acquired", what)
		case !errors.Is(err, dlock.ErrMisconfigured):
			t.Errorf("%s: %v, want ErrMisconfigured", what, err)
		case !errors.As(err, &re) || !strings.HasPrefix(re.Error(), reply):
			t.Errorf("%s: %v, want the server's %s reply in the chain", what, err, reply)
		case strings.Contains(err.Error(), "unreachable"):
			t.Errorf("%s: %q calls an answering server unreachable", what, err)
		}
		if n := raw.Exists(testCtx(t), key).Val(); n != 0 {
			t.Errorf("%s: the failed attempt left the lock key %q behind (TTL %v)", what, key, raw.PTTL(testCtx(t), key).Val())
		}
	}
	check(l, "ACL without ~dlock:*", "locks:invoice", "NOPERM")

	key := lockcheck.Key(t)
	raw.LPush(testCtx(t), keys.Fence(key), "x")
	check(newLocker(t, srv.Client(t)), "fence counter of the wrong type", key, "WRONGTYPE")
}
