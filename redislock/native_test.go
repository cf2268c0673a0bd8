package redislock_test

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// A server with SET IFEQ (Redis 8.4, Valkey 8.1) extends a lock with a
// fence exactly as the script does elsewhere: the fence counter is raised
// back to the lock's fence when it was lost, and its TTL renewed. SET IFEQ
// alone renews only the lock key. (Redis 7 runs here, told by the test
// that it has SET IFEQ: an extension that sends SET IFEQ fails on it.)
func TestExtendRefreshesFenceCounterWithSetIfEq(t *testing.T) {
	raw := shared.Client(t)
	l := newLocker(t, shared.Client(t), redislock.WithFenceTTL(time.Minute))
	l.SetFeatures(rclient.Native{SetIfEq: true})
	key := lockcheck.Key(t)
	lock, err := l.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(testCtx(t))
	counter := keys.Fence(key)
	if err := raw.Del(testCtx(t), counter).Err(); err != nil { // lost (a failover, say)
		t.Fatal(err)
	}
	if err := lock.Extend(testCtx(t), 10*time.Second); err != nil {
		t.Fatalf("extend: %v", err)
	}
	v, err := raw.Get(testCtx(t), counter).Result()
	if err != nil {
		t.Fatalf("the extension did not restore the fence counter: %v", err)
	}
	if v != strconv.FormatUint(lock.Fence(), 10) {
		t.Fatalf("fence counter %s after the extension, want the lock's fence %d", v, lock.Fence())
	}
	if pttl := raw.PTTL(testCtx(t), counter).Val(); pttl < 50*time.Second {
		t.Fatalf("fence counter's TTL %v after the extension, want about the fence TTL (1m)", pttl)
	}
}

// A server that may evict keys before their TTL is named in a warning,
// once per Locker, whatever commands it has.
func TestEvictionPolicyWarning(t *testing.T) {
	srv := testsrv.StartRedis(t, testsrv.RedisArgs("--maxmemory-policy", "allkeys-lru"))
	var log strings.Builder
	l := newLocker(t, srv.Client(t), redislock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	for range 2 {
		lock, err := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(log.String(), "maxmemory-policy=allkeys-lru"); n != 1 {
		t.Fatalf("%d eviction warnings naming allkeys-lru, want 1; log:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), srv.Addr) {
		t.Fatalf("the warning does not name the server %s:\n%s", srv.Addr, log.String())
	}
}
