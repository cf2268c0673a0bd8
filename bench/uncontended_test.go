package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rnode"
	dlockredis "github.com/dlock-go/dlock/redislock"
)

var errBusy = errors.New("bench: lock unexpectedly busy")

// cycleFunc takes and releases one lock on its key.
type cycleFunc func(ctx context.Context) error

// single is one implementation of a single-node lock: setup runs once per
// client and returns a constructor of cycles on a key.
type single struct {
	name  string
	setup func(tb testing.TB, c *redis.Client) func(key string) cycleFunc
}

var singles = []single{
	{"raw", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		return func(key string) cycleFunc {
			return func(ctx context.Context) error {
				tok := token()
				ok, err := c.SetNX(ctx, key, tok, ttl).Result()
				if err != nil {
					return err
				}
				if !ok {
					return errBusy
				}
				return rawRelease.Run(ctx, c, []string{key}, tok).Err()
			}
		}
	}},
	{"raw-lua", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		// dlock's own acquire and release scripts, with the arguments dlock
		// sends, called straight through go-redis: dlock's cycle without the
		// library's Go code around it.
		return func(key string) cycleFunc {
			ks := []string{key, keys.Fence(key)}
			counterTTL := backend.FenceTTL.Milliseconds()
			rel := []string{key, keys.Queue(key)}
			return func(ctx context.Context) error {
				tok := token()
				v, err := rnode.AcquireScript.Run(ctx, c, ks, tok, ttl.Milliseconds(), counterTTL).Result()
				if err != nil {
					return err
				}
				if _, granted := v.(string); !granted { // a grant's reply is the fence alone
					return errBusy
				}
				return rnode.ReleaseScript.Run(ctx, c, rel, tok).Err()
			}
		}
	}},
	{"raw-fenced", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		// The least a fenced lock can send: SET NX PX and an INCR of a
		// counter as plain commands in one pipeline (no script), then the
		// classic compare-and-delete. dlock's script also reads the clock,
		// gives the counter a TTL and checks the key before it writes.
		return func(key string) cycleFunc {
			fk := keys.Fence(key)
			return func(ctx context.Context) error {
				tok := token()
				p := c.Pipeline()
				set := p.SetNX(ctx, key, tok, ttl)
				p.Incr(ctx, fk)
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
				if !set.Val() {
					return errBusy
				}
				return rawRelease.Run(ctx, c, []string{key}, tok).Err()
			}
		}
	}},
	{"dlock", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		l := newDlock(tb, c)
		return func(key string) cycleFunc { return tryCycle(l, key) }
	}},
	{"dlock-wait", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		// The waiting form (Acquire), which registers for wake-ups first.
		l := newDlock(tb, c)
		return func(key string) cycleFunc {
			return func(ctx context.Context) error {
				lock, err := dlock.Acquire(ctx, l, key, ttl)
				if err != nil {
					return err
				}
				return lock.Release(ctx)
			}
		}
	}},
	{"redsync", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		rs := redsync.New(goredis.NewPool(c))
		return func(key string) cycleFunc {
			m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
			return func(ctx context.Context) error {
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				if ok, err := m.UnlockContext(ctx); !ok {
					return errors.Join(errBusy, err)
				}
				return nil
			}
		}
	}},
	{"bsm", func(tb testing.TB, c *redis.Client) func(string) cycleFunc {
		lc := redislock.New(c)
		return func(key string) cycleFunc {
			return func(ctx context.Context) error {
				lock, err := lc.Obtain(ctx, key, ttl, nil)
				if err != nil {
					return err
				}
				return lock.Release(ctx)
			}
		}
	}},
}

// tryCycle returns cycles that take key with l's TryAcquire and release it
// at once: dlock's cycle on every backend.
func tryCycle(l dlock.Locker, key string) cycleFunc {
	return func(ctx context.Context) error {
		lock, err := l.TryAcquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		return lock.Release(ctx)
	}
}

func newDlock(tb testing.TB, c redis.UniversalClient, opts ...dlockredis.Option) *dlockredis.Locker {
	l, err := dlockredis.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// warmCycles is measure's warm-up: connections, scripts.
const warmCycles = 200

// measure runs b.N cycles after a warm-up and reports cycles/s, p50/p99
// and (through b.ReportAllocs) allocations per cycle.
func measure(b *testing.B, cycle cycleFunc) {
	ctx := context.Background()
	for range warmCycles {
		if err := cycle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t0 := time.Now()
		if err := cycle(ctx); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatency(b, lat, elapsed)
}

// BenchmarkA: one goroutine, one client, one key; acquire then release.
// server-us/cycle is the server's own time per cycle (INFO commandstats)
// in the commands the client sent, a script's included (a command sent
// and also run by a script counts for the calls sent, at its average).
func BenchmarkA(b *testing.B) {
	for _, s := range singles {
		b.Run(s.name, func(b *testing.B) {
			c := newClient(b, redisAddr)
			names := &sentNames{}
			c.AddHook(names)
			cycle := s.setup(b, c)(freshKey("A"))
			n0, before := cmdStats(b, c)
			sent0 := map[string]float64{}
			for _, name := range names.list() {
				sent0[name] = names.sent(name)
			}
			measure(b, cycle)
			n1, after := cmdStats(b, c)
			var usec float64
			for _, name := range names.list() {
				// A command that the client sent and that a script also
				// runs counts for its share of the calls sent (a
				// script's usec already includes what it ran).
				du, dn, sent := after[name]-before[name], n1[name]-n0[name], names.sent(name)-sent0[name]
				if dn > 0 {
					usec += du * min(1, sent/dn)
				}
			}
			b.ReportMetric(usec/float64(b.N+warmCycles), "server-us/cycle")
		})
	}
	b.Run("rueidislock", func(b *testing.B) {
		l := newRueidislock(b, redisAddr)
		key := freshKey("A")
		measure(b, func(ctx context.Context) error {
			_, cancel, err := l.TryWithContext(ctx, key)
			if err != nil {
				return err
			}
			cancel() // releases, and returns once the key is deleted
			return nil
		})
	})
}

// newRueidislock returns a single-key rueidislock locker (KeyMajority 1: one
// key per lock, as the others use; its default is three keys).
func newRueidislock(tb testing.TB, addr string) rueidislock.Locker {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  1,
		KeyValidity:  ttl,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(l.Close)
	return l
}

// BenchmarkD: 64 goroutines, each on its own key, share one client (and
// one Locker): the library's own overhead under parallel load.
func BenchmarkD(b *testing.B) {
	for _, s := range singles {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			onOwnKeys(b, "D", s.setup(b, newClient(b, redisAddr)))
		})
	}
}

// onOwnKeys runs 64 goroutines, each on a key of its own made by mk, and
// reports their cycles per second.
func onOwnKeys(b *testing.B, prefix string, mk func(key string) cycleFunc) {
	var mu sync.Mutex
	b.SetParallelism(32) // 32 x GOMAXPROCS(2) = 64 goroutines
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		cycle := mk(freshKey(prefix))
		mu.Unlock()
		ctx := context.Background()
		for pb.Next() {
			if err := cycle(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
}
