package bench

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rnode"
	dlockredis "github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
)

// The fence TTLs of BenchmarkResidue's Lockers, instead of the default hour:
// the time after which a released name leaves nothing on the servers. Each
// is meant to be longer than its backend's whole run (3-6s on one server and
// 22-28s for Redlock's five on a busy 2-core machine), so that every counter
// is still there right after it; the memory per counter does not depend on
// that.
const (
	residueFenceTTL        = 10 * time.Second
	residueRedlockFenceTTL = 30 * time.Second
)

// BenchmarkResidue locks and releases many distinct names (100,000, or
// BENCH_RESIDUE_NAMES), as a service that locks per invoice or per user id
// does, and reports what the servers hold before, right after, and once the
// fence TTL has passed: keys (DBSIZE) and used_memory, summed over the
// servers, and used_memory per fence counter. One cycle per name, TryAcquire then Release, from 32 goroutines
// on one Locker; TryAcquire does not queue, so what a name leaves is its
// fence counter. Run it on servers no other group has used yet (run.sh runs
// it first), so that nothing else expires meanwhile.
func BenchmarkResidue(b *testing.B) {
	names := 100_000
	if s := os.Getenv("BENCH_RESIDUE_NAMES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("BENCH_RESIDUE_NAMES=%q: want a positive number", s)
		}
		names = n
	}
	b.Run("redislock", func(b *testing.B) {
		residue(b, []string{redisAddr}, names, residueFenceTTL, func(tb testing.TB, cs []redis.UniversalClient) dlock.Locker {
			l, err := dlockredis.New(cs[0], dlockredis.WithFenceTTL(residueFenceTTL))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { l.Close() })
			return l
		})
	})
	b.Run("redlock", func(b *testing.B) {
		residue(b, redlockAddrs, names, residueRedlockFenceTTL, func(tb testing.TB, cs []redis.UniversalClient) dlock.Locker {
			// A long node timeout: 32 goroutines on a small machine can
			// keep a node's requests waiting past the default 50ms, and an
			// attempt or release that fails leaves its key behind for the
			// lock's TTL, which is not what this group measures.
			l, err := redlock.New(cs, redlock.WithFenceTTL(residueRedlockFenceTTL), redlock.WithNodeTimeout(time.Second))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { l.Close() }) // lets the last releases finish on every node
			return l
		})
	})
}

// footprint is what a set of servers holds.
type footprint struct{ keys, mem int64 }

func measureFootprint(b *testing.B, cs []*redis.Client) footprint {
	var f footprint
	for _, c := range cs {
		n, err := c.DBSize(context.Background()).Result()
		if err != nil {
			b.Fatal(err)
		}
		f.keys += n
		// Less the clients' buffers, which grow and shrink with the
		// connections' traffic (a burst of requests leaves each connection
		// a buffer that the server frees seconds later).
		mem := infoFields(b, c, "memory")
		f.mem += mem.int(b, "used_memory") - mem.int(b, "mem_clients_normal")
	}
	return f
}

// residue runs one pass of BenchmarkResidue with the Locker that newLocker
// makes over clients of addrs. The Locker's clients connect after the first
// measurement and are closed before the others, so that each measures the
// servers with one connection, the admin's: a connection's buffers would
// otherwise add tens of kB each, varying with its recent traffic.
func residue(b *testing.B, addrs []string, names int, fenceTTL time.Duration, newLocker func(tb testing.TB, cs []redis.UniversalClient) dlock.Locker) {
	b.StopTimer()
	ctx := context.Background()
	admins := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		admins[i] = newClient(b, a)
		warmScripts(b, admins[i])
	}
	before := measureFootprint(b, admins)

	lockers := &windowTB{TB: b}
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = newClient(lockers, a)
	}
	l := newLocker(lockers, cs)
	prefix := freshKey("R")
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(names); i = next.Add(1) {
				lock, err := l.TryAcquire(ctx, prefix+":"+strconv.FormatInt(i, 10), ttl)
				if err == nil {
					err = lock.Release(ctx)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	lockers.close()
	released := time.Now()
	waitDisconnected(b, admins)
	after := measureFootprint(b, admins)

	// The counters expire fenceTTL after the release that wrote them; the
	// server then removes expired keys in its background cycle. Wait for
	// that, up to 30s more.
	time.Sleep(time.Until(released.Add(fenceTTL)))
	idle := measureFootprint(b, admins)
	for deadline := time.Now().Add(30 * time.Second); idle.keys > before.keys && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		idle = measureFootprint(b, admins)
	}
	gone := time.Since(released)

	b.ReportMetric(float64(names), "names")
	b.ReportMetric(float64(len(addrs)), "servers")
	b.ReportMetric(float64(names)/took.Seconds(), "cycles/s")
	b.ReportMetric(fenceTTL.Seconds(), "fence-ttl-s")
	b.ReportMetric(float64(before.keys), "keys-before")
	b.ReportMetric(float64(after.keys), "keys-after")
	b.ReportMetric(float64(idle.keys), "keys-idle")
	b.ReportMetric(float64(before.mem), "mem-before-B")
	b.ReportMetric(float64(after.mem), "mem-after-B")
	b.ReportMetric(float64(idle.mem), "mem-idle-B")
	if counters := after.keys - before.keys; counters > 0 {
		b.ReportMetric(float64(after.mem-before.mem)/float64(counters), "B/counter")
	}
	b.ReportMetric(gone.Seconds(), "idle-after-s")
	if idle.keys > before.keys {
		b.Errorf("%d keys left %v after the last release (fence TTL %v)", idle.keys-before.keys, gone.Round(time.Millisecond), fenceTTL)
	}
}

// waitDisconnected waits (up to a second) until the admins' connections are
// the only ones on their servers: the server frees a closed connection's
// memory when it notices.
func waitDisconnected(b *testing.B, admins []*redis.Client) {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		alone := true
		for _, c := range admins {
			alone = alone && infoFields(b, c, "clients").int(b, "connected_clients") <= 1
		}
		if alone {
			return
		}
	}
}

// warmScripts runs dlock's acquire and release scripts once on c's server,
// on a name of its own, and deletes the fence counter they leave: a
// script's first run allocates memory that the server keeps (about 160kB for
// the two on Redis 7.0, the same after 5,000 names as after 100,000), which
// would otherwise count as residue.
func warmScripts(b *testing.B, c *redis.Client) {
	ctx := context.Background()
	key := freshKey("R-warm")
	tok := token()
	if err := rnode.AcquireScript.Run(ctx, c, []string{key, keys.Fence(key)}, tok, ttl.Milliseconds(), time.Minute.Milliseconds()).Err(); err != nil {
		b.Fatal(err)
	}
	if err := rnode.ReleaseScript.Run(ctx, c, []string{key, keys.Queue(key)}, tok).Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.Del(ctx, keys.Fence(key)).Err(); err != nil {
		b.Fatal(err)
	}
}
