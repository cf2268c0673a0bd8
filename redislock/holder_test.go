package redislock_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
// the extension and the release go as pipelines, and a refusal on a new
// connection (WRONGPASS once the user's password changed) reads as what
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
