package compat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
)

// The lines docs/testing-your-code.md shows for a test that wants Redis's
// semantics without a server: redislock on miniredis. miniredis moves TTLs
// only when told, so the key outlives its TTL until the test calls
// FastForward, and then the lock is another owner's for the taking; DEL
// takes a lock away behind its holder's back, and Close is an outage.
func TestMiniredisForUsersTests(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	locker, err := redislock.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locker.Close(); client.Close() })

	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryAcquire(ctx, "job", time.Minute); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	mr.FastForward(time.Minute)
	next, err := locker.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the TTL ran out on the server: %v", err)
	}
	if next.Fence() <= lock.Fence() {
		t.Fatalf("fence %d after %d", next.Fence(), lock.Fence())
	}
	if err := lock.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend of the expired lock: %v, want ErrNotHeld", err)
	}
	mr.Del("job") // behind the holder's back: it learns at its next extension
	if err := next.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after DEL: %v, want ErrNotHeld", err)
	}
	mr.Close() // an outage
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := locker.TryAcquire(c, "job", time.Minute); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryAcquire after Close: %v, want ErrUnavailable", err)
	}
}
