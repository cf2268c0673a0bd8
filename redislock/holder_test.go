package redislock_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// WithHolderInfo publishes the holder with the grant, Inspect shows it,
// extension renews its TTL and release deletes it; a refused attempt
// writes nothing over the holder's record.
func TestHolderInfo(t *testing.T) {
	ctx := testCtx(t)
	c := shared.Client(t)
	l := newLocker(t, c, redislock.WithHolderInfo("billing"))
	lk, err := l.TryAcquire(ctx, "holder:a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := l.Inspect(ctx, "holder:a", 0)
	host, _ := os.Hostname()
	if err != nil || len(rows) != 1 || rows[0].Host != host || rows[0].PID != os.Getpid() ||
		rows[0].Service != "billing" || time.Since(rows[0].Since) > time.Minute {
		t.Fatalf("Inspect: %+v, %v; want host %s pid %d service billing", rows, err, host, os.Getpid())
	}
	before := c.Get(ctx, keys.Holder("holder:a")).Val()
	if _, err := newLocker(t, c, redislock.WithHolderInfo("other")).TryAcquire(ctx, "holder:a", time.Second); err == nil {
		t.Fatal("second TryAcquire granted")
	}
	if after := c.Get(ctx, keys.Holder("holder:a")).Val(); after != before {
		t.Fatalf("a refused attempt rewrote the holder record: %s -> %s", before, after)
	}
	if err := lk.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, keys.Holder("holder:a")).Val(); ttl < 20*time.Second {
		t.Fatalf("holder record's TTL %v after Extend(30s)", ttl)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "holder:a", keys.Holder("holder:a")).Val(); n != 0 {
		t.Fatalf("%d keys left after Release", n)
	}
	// Off by default: nothing beside the lock.
	lk, err = newLocker(t, c).TryAcquire(ctx, "holder:b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	if n := c.Exists(ctx, keys.Holder("holder:b")).Val(); n != 0 {
		t.Fatal("a holder record without WithHolderInfo")
	}
}

// A holder whose key was lost (deleted: a failover) and went to another
// holder leaves the new holder's record alone: its extension, refused, does
// not write its own record over it, and its release does not delete it.
func TestHolderInfoOfALaterHolder(t *testing.T) {
	ctx := testCtx(t)
	raw := shared.Client(t)
	key := lockcheck.Key(t)
	old, err := newLocker(t, raw, redislock.WithHolderInfo("old")).TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	later, err := newLocker(t, raw, redislock.WithHolderInfo("later")).TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer later.Release(ctx)
	rec := raw.Get(ctx, keys.Holder(key)).Val()
	if !strings.Contains(rec, later.Token()) {
		t.Fatalf("holder record %q, want the later holder's", rec)
	}
	lockcheck.WantOneOf(t, old.Extend(ctx, time.Hour), dlock.ErrNotHeld, dlock.ErrLockLost)
	if got, ttl := raw.Get(ctx, keys.Holder(key)).Val(), raw.PTTL(ctx, keys.Holder(key)).Val(); got != rec || ttl > time.Minute {
		t.Fatalf("after the earlier holder's Extend: record %q (TTL %v), want %q (TTL at most 1m)", got, ttl, rec)
	}
	lockcheck.WantOneOf(t, old.Release(ctx), dlock.ErrNotHeld, dlock.ErrLockLost)
	if got := raw.Get(ctx, keys.Holder(key)).Val(); got != rec {
		t.Fatalf("after the earlier holder's Release: record %q, want %q", got, rec)
	}
}

// BenchmarkHolderInfo: an uncontended TryAcquire+Release cycle without and
// with WithHolderInfo.
func BenchmarkHolderInfo(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []redislock.Option
	}{{"off", nil}, {"on", []redislock.Option{redislock.WithHolderInfo("bench")}}} {
		b.Run(bc.name, func(b *testing.B) {
			c := shared.Client(b)
			l, err := redislock.New(c, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				lk, err := l.TryAcquire(ctx, "bench:holder", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Every path keeps the server's own reason: with WithHolderInfo the grant,
// the extension and the release each write the record in their own script,
// and a refusal on a new connection (WRONGPASS once the user's password changed) reads as what
// the server said, not as an unexpected empty reply.
func TestHolderInfoKeepsServerReason(t *testing.T) {
	srv := testsrv.StartRedis(t)
	l := newLocker(t, userClient(t, srv, "app"), redislock.WithHolderInfo("billing"))
	extended, err := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released, err := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	raw := srv.Client(t)
	if err := raw.Do(testCtx(t), "ACL", "SETUSER", "app", "resetpass", ">changed").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(testCtx(t), "CLIENT", "KILL", "USER", "app").Err(); err != nil {
		t.Fatal(err)
	}
	_, acquireErr := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Minute)
	for name, err := range map[string]error{
		"TryAcquire": acquireErr,
		"Extend":     extended.Extend(testCtx(t), time.Minute),
		"Release":    released.Release(testCtx(t)),
	} {
		var re redis.Error
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s after the password changed: %v, want the server's WRONGPASS", name, err)
		}
	}
}

// With WithHolderInfo the lock's scripts write the holder record. A flushed
// script cache (cold, or warmed again by a Locker without the record) makes
// a call the server does not know run again with EVAL, so the record is
// still written, renewed and deleted with the lock.
func TestHolderInfoScriptCacheFlushed(t *testing.T) {
	ctx := testCtx(t)
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t), redislock.WithHolderInfo("svc"))
	plain := newLocker(t, shared.Client(t))
	for _, tc := range []struct {
		name string
		warm bool // the scripts cached again by a Locker without the record
	}{{"all flushed", false}, {"warmed again without the record", true}} {
		t.Run(tc.name, func(t *testing.T) {
			key := lockcheck.Key(t)
			flush := func() {
				t.Helper()
				if err := raw.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if !tc.warm {
					return
				}
				lk, err := plain.TryAcquire(ctx, key+":warm", time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if err := lk.Extend(ctx, time.Second); err != nil {
					t.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			flush()
			lk, err := l.TryAcquire(ctx, key, 2*time.Second)
			if err != nil {
				t.Fatalf("acquire after SCRIPT FLUSH: %v", err)
			}
			if rec := raw.Get(ctx, keys.Holder(key)).Val(); !strings.Contains(rec, lk.Token()) {
				t.Fatalf("holder record after acquire: %q, want one with the token", rec)
			}
			flush()
			if err := lk.Extend(ctx, 30*time.Second); err != nil {
				t.Fatalf("extend after SCRIPT FLUSH: %v", err)
			}
			for _, k := range []string{key, keys.Holder(key)} {
				if ttl := raw.PTTL(ctx, k).Val(); ttl < 20*time.Second {
					t.Fatalf("%s's TTL %v after Extend(30s)", k, ttl)
				}
			}
			flush()
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("release after SCRIPT FLUSH: %v", err)
			}
			if n := raw.Exists(ctx, key, keys.Holder(key)).Val(); n != 0 {
				t.Fatalf("%d keys left after Release", n)
			}
		})
	}
}
