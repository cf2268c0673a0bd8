package redlock_test

import (
	"context"
	"fmt"
	"strings"
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

// Every public error path of redlock returns an error that matches exactly
// one of dlock's sentinels, on one line, with one "dlock: " prefix
// (lockcheck.Classify), and the context's error where the caller's context
// ended.
func TestErrorSentinels(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	l := newLocker(t, rs)
	raw := clients(t, rs)
	held := lockcheck.Key(t)
	holder := mustAcquire(t, l, held, time.Minute)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	down := testsrv.StartRedisN(t, 3)
	gone := newLocker(t, down)
	for _, r := range down[:2] {
		r.Kill()
	}
	steal := func(lock *dlock.Lock) *dlock.Lock {
		for _, c := range raw {
			c.Set(context.Background(), lock.Key(), "someone else", time.Minute)
		}
		return lock
	}
	released := func() *dlock.Lock {
		lock := mustAcquire(t, l, lockcheck.Key(t), time.Minute)
		lock.Release(testCtx(t))
		return lock
	}
	tryL := func(l *redlock.Locker, ctx context.Context, key string, ttl time.Duration) error {
		lock, err := l.TryAcquire(ctx, key, ttl)
		if err == nil {
			lock.Release(context.Background())
		}
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
		also []error
	}{
		{"no clients", func() error { _, err := redlock.New(nil); return err }(), dlock.ErrInvalid, nil},
		{"nil client", func() error { _, err := redlock.New([]redis.UniversalClient{nil}); return err }(), dlock.ErrInvalid, nil},
		{"prefix in dlock's namespace", func() error { _, err := redlock.New(raw, redlock.WithPrefix("dlock:")); return err }(), dlock.ErrInvalid, nil},
		{"empty key", tryL(l, testCtx(t), "", time.Second), dlock.ErrInvalid, nil},
		{"key in dlock's namespace", tryL(l, testCtx(t), "dlock:waiters:{x}", time.Second), dlock.ErrInvalid, nil},
		{"repeated keys", func() error { _, err := l.Keys("a", "a").TryAcquire(testCtx(t), "a,a", time.Second); return err }(), dlock.ErrInvalid, nil},
		{"ttl below the drift margin", tryL(l, testCtx(t), "k", 2*time.Millisecond), dlock.ErrInvalid, nil},
		{"busy", tryL(l, testCtx(t), held, time.Second), dlock.ErrNotAcquired, nil},
		{"wait cancelled", func() error {
			c, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
			defer cancel()
			_, err := dlock.Acquire(c, l, held, time.Second)
			return err
		}(), dlock.ErrNotAcquired, []error{context.DeadlineExceeded}},
		{"attempt cancelled", tryL(l, cancelled, "k", time.Second), dlock.ErrNotAcquired, []error{context.Canceled}},
		{"majority down", tryL(gone, testCtx(t), "k", time.Second), dlock.ErrUnavailable, nil},
		{"ReleaseToken, wrong token", l.ReleaseToken(testCtx(t), held, "not-the-token"), dlock.ErrNotHeld, nil},
		{"ExtendToken, wrong token", l.ExtendToken(testCtx(t), held, "not-the-token", time.Minute), dlock.ErrNotHeld, nil},
		{"ReleaseToken, majority down", gone.ReleaseToken(testCtx(t), "k", "t"), dlock.ErrUnavailable, nil},
		{"Extend of a lock taken away", steal(mustAcquire(t, l, lockcheck.Key(t), time.Minute)).Extend(testCtx(t), time.Minute), dlock.ErrNotHeld, nil},
		{"Release of a lock taken away", steal(mustAcquire(t, l, lockcheck.Key(t), time.Minute)).Release(testCtx(t)), dlock.ErrNotHeld, nil},
		{"Release twice", released().Release(testCtx(t)), dlock.ErrNotHeld, nil},
		{"Extend with ttl 0", holder.Extend(testCtx(t), 0), dlock.ErrInvalid, nil},
		{"Do, lock taken away", dlock.Do(testCtx(t), l, lockcheck.Key(t), time.Second, func(ctx context.Context) error {
			steal(dlock.LockFromContext(ctx))
			<-ctx.Done()
			return nil
		}), dlock.ErrLockLost, nil},
	} {
		t.Run(tc.name, func(t *testing.T) { lockcheck.WantError(t, tc.err, tc.want, tc.also...) })
	}
}

// Nodes that refuse for a reason retrying cannot change (a wrong password)
// make the operation fail at once with dlock.ErrMisconfigured once too
// many refuse for a majority to agree; a minority that refuses is outvoted
// like a minority that is down.
func TestMisconfigured(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	for _, r := range rs[:2] {
		if err := r.Client(t).ConfigSet(testCtx(t), "requirepass", "secret").Err(); err != nil {
			t.Fatal(err)
		}
	}
	wrong := func(o *redis.Options) { o.Password = "wrong" }
	right := func(o *redis.Options) { o.Password = "secret" }
	newL := func(cs ...redis.UniversalClient) *redlock.Locker {
		l, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	two := newL(client(t, rs[0].Addr, wrong), client(t, rs[1].Addr, wrong), client(t, rs[2].Addr))
	lockcheck.WantRefused(t, two, lockcheck.Key(t), "WRONGPASS")
	_, inspectErr := two.Inspect(testCtx(t), "*", 0)
	for name, err := range map[string]error{
		"ExtendToken":  two.ExtendToken(testCtx(t), "k", "t", time.Second),
		"ReleaseToken": two.ReleaseToken(testCtx(t), "k", "t"),
		"Inspect":      inspectErr,
	} {
		lockcheck.WantError(t, err, dlock.ErrMisconfigured)
		if !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s with two of three nodes refusing: %v, want the servers' reason", name, err)
		}
	}

	one := newL(client(t, rs[0].Addr, wrong), client(t, rs[1].Addr, right), client(t, rs[2].Addr))
	mustAcquire(t, one, lockcheck.Key(t), time.Minute)

	// One refuses and one is down: the down one may come back.
	down := testsrv.StartRedis(t)
	down.Kill()
	mixed := newL(client(t, rs[0].Addr, wrong), client(t, down.Addr), client(t, rs[2].Addr))
	_, err := mixed.TryAcquire(testCtx(t), lockcheck.Key(t), time.Second)
	lockcheck.WantError(t, err, dlock.ErrUnavailable)
}

// Nodes that may evict keys before their TTL are named in a warning, once
// each: an evicted lock key on a node is a vote for a second holder.
func TestEvictionPolicyWarning(t *testing.T) {
	lru := testsrv.StartRedisN(t, 2, testsrv.RedisArgs("--maxmemory-policy", "allkeys-lru"))
	rs := append(lru, testsrv.StartRedis(t))
	var log logBuffer
	l := newLocker(t, rs, redlock.WithLogger(log.logger()))
	defer l.Close()
	for range 2 {
		lock := mustAcquire(t, l, lockcheck.Key(t), 5*time.Second)
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	out := log.String()
	if n := strings.Count(out, "maxmemory-policy=allkeys-lru"); n != len(lru) {
		t.Fatalf("%d eviction warnings, want one per evicting node (%d); log:\n%s", n, len(lru), out)
	}
	for _, r := range lru {
		if !strings.Contains(out, "node="+r.Addr) {
			t.Fatalf("no warning names %s:\n%s", r.Addr, out)
		}
	}
	if strings.Contains(out, "node="+rs[2].Addr) {
		t.Fatalf("a warning names %s, whose policy is noeviction:\n%s", rs[2].Addr, out)
	}
}

// A reply that cannot be read (here: a fence counter corrupted by hand
// makes the scripts answer a grant with a negative fence) is a node's
// failure, described the same way for a permit as for a lock.
func TestUnreadableReply(t *testing.T) {
	ctx := testCtx(t)
	l := newLocker(t, shared)
	a, b, name := lockcheck.Key(t)+"a", lockcheck.Key(t)+"b", lockcheck.Key(t)
	for _, c := range clients(t, shared) {
		for _, k := range []string{a, bridge.SlotPrefix(name) + "0"} {
			if err := c.Set(ctx, keys.Fence(k), "1e400", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, lockErr := l.Keys(a, b).TryAcquire(ctx, a+","+b, time.Minute)
	_, permitErr := dlock.Semaphore(l, 1).TryAcquire(ctx, name, time.Minute)
	for what, err := range map[string]error{"lock": lockErr, "permit": permitErr} {
		lockcheck.WantError(t, err, dlock.ErrUnavailable)
		if !strings.Contains(fmt.Sprint(err), ": unreachable: unexpected reply") {
			t.Errorf("%s: %v, want each node's unreadable reply as a node's failure", what, err)
		}
	}
}

// A node whose ACL denies INFO is probed once: later attempts do not pay
// the probe's round trip again for want of a run_id.
func TestNodeDenyingINFOProbedOnce(t *testing.T) {
	ctx := testCtx(t)
	rs := testsrv.StartRedisN(t, 3)
	cs := make([]redis.UniversalClient, len(rs))
	for i, r := range rs {
		if err := r.Client(t).Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
			t.Fatal(err)
		}
		cs[i] = client(t, r.Addr, func(o *redis.Options) { o.Username, o.Password = "app", "pw" })
	}
	l, err := redlock.New(cs, redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	key := lockcheck.Key(t)
	for range 5 {
		lock := mustAcquire(t, l, key, 5*time.Second)
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rs {
		stats := r.Client(t).Info(ctx, "commandstats").Val()
		_, line, _ := strings.Cut(stats, "cmdstat_info:")
		line, _, _ = strings.Cut(line, "\n")
		if !strings.Contains(line, "rejected_calls=1,") {
			t.Errorf("node %d: INFO over 5 acquisitions: %q, want rejected_calls=1", i, strings.TrimSpace(line))
		}
	}
}
