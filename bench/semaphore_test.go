package bench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
)

// The semaphore group (S): 16 contenders, each with a client of its own as
// separate processes would have, take permits of one semaphore of 4 on one
// Redis node, hold each for semHold and go again at once. Each contender's
// wait (from the call to the grant) is recorded; the fairness figure is the
// longest wait against the median. dlock waits with dlock.Acquire on
// redislock's semaphore (a FIFO of waiters, woken by a release); the
// polling peer is redis-semaphore's design written out raw: a ZSET of
// holders scored by the client's clock, entries older than the TTL removed,
// a permit granted while fewer than the limit remain, tried every 10 ms.
const (
	semLimit      = 4
	semContenders = 16
	semHold       = 5 * time.Millisecond
	semPoll       = 10 * time.Millisecond
	semTTL        = 10 * time.Second
)

// semPollAcquire is the polling peer's attempt: KEYS[1] the holders' ZSET;
// ARGV the client's clock in ms, the TTL in ms, the limit, the holder id.
var semPollAcquire = redis.NewScript(`
redis.call('zremrangebyscore', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('zadd', KEYS[1], ARGV[1], ARGV[4])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0`)

// semImpl takes one permit (waiting as long as it must) and returns its
// release.
type semImpl func(ctx context.Context) (release func(), err error)

func dlockSemaphore(tb testing.TB, name string) semImpl {
	l, err := redislock.New(newClient(tb, redisAddr))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	sem := dlock.Semaphore(l, semLimit)
	return func(ctx context.Context) (func(), error) {
		lock, err := dlock.Acquire(ctx, sem, name, semTTL)
		if err != nil {
			return nil, err
		}
		return func() { _ = lock.Release(context.WithoutCancel(ctx)) }, nil
	}
}

func pollingSemaphore(tb testing.TB, name string) semImpl {
	c := newClient(tb, redisAddr)
	return func(ctx context.Context) (func(), error) {
		id := token()
		for {
			ok, err := semPollAcquire.Run(ctx, c, []string{name}, time.Now().UnixMilli(), semTTL.Milliseconds(), semLimit, id).Int()
			if err != nil {
				return nil, err
			}
			if ok == 1 {
				return func() { _ = c.ZRem(context.WithoutCancel(ctx), name, id).Err() }, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(semPoll):
			}
		}
	}
}

// BenchmarkS runs each implementation for one window per pass and reports
// the waits' median, 99th percentile and maximum, the maximum over the
// median, the permits granted per second, and the least served
// contender's share of the permits against an even share (1: even). b.N is ignored: the window
// is the unit.
func BenchmarkS(b *testing.B) {
	for _, impl := range []struct {
		name    string
		newImpl func(testing.TB, string) semImpl
	}{{"dlock", dlockSemaphore}, {"poll10ms", pollingSemaphore}} {
		b.Run(impl.name, func(b *testing.B) {
			for range b.N {
				waits, per, elapsed := semWindow(b, impl.newImpl)
				n := 0
				for _, k := range per {
					n += k
				}
				slices.Sort(waits)
				p50 := pct(waits, 0.5)
				b.ReportMetric(ms(p50), "p50-ms")
				b.ReportMetric(ms(pct(waits, 0.99)), "p99-ms")
				b.ReportMetric(ms(waits[len(waits)-1]), "max-ms")
				b.ReportMetric(float64(waits[len(waits)-1])/float64(p50), "max/p50")
				b.ReportMetric(float64(n)/elapsed.Seconds(), "permits/s")
				b.ReportMetric(float64(slices.Min(per))*float64(len(per))/float64(n), "min-share")
			}
		})
	}
}

// semWindow runs the contenders for one window and returns every wait and
// the permits each contender was granted. A wait the window's end cut short counts as long as
// it lasted, so that a contender starved to the end is not left out.
func semWindow(b *testing.B, newImpl func(testing.TB, string) semImpl) ([]time.Duration, []int, time.Duration) {
	name := freshKey("sem")
	impls := make([]semImpl, semContenders)
	for i := range impls {
		impls[i] = newImpl(b, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var mu sync.Mutex
	var waits []time.Duration
	granted := make([]int, semContenders)
	var wg sync.WaitGroup
	start := time.Now()
	for i, acquire := range impls {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				release, err := acquire(ctx)
				w := time.Since(t0)
				mu.Lock()
				waits = append(waits, w)
				if err == nil {
					granted[i]++
				}
				mu.Unlock()
				if err != nil {
					return // the window ended while it waited
				}
				time.Sleep(semHold)
				release()
			}
		})
	}
	wg.Wait()
	if slices.Max(granted) == 0 {
		b.Fatalf("no permit granted in %v", window)
	}
	return waits, granted, time.Since(start)
}
