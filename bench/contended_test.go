package bench

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

const contenders = 16

// releaseFunc gives back a lock that a waiter obtained.
type releaseFunc func(ctx context.Context) error

// waitFunc waits until it holds key or ctx ends.
type waitFunc func(ctx context.Context) (releaseFunc, error)

// contended is one implementation's waiting acquire; newWaiter is called
// once per goroutine, each with its own client.
type contended struct {
	name      string
	newWaiter func(tb testing.TB, addr, key string) waitFunc
}

var contendeds = []contended{
	{"raw-poll-1ms", func(tb testing.TB, addr, key string) waitFunc {
		// The leanest polling loop: SET NX PX every millisecond.
		c := newClient(tb, addr)
		return func(ctx context.Context) (releaseFunc, error) {
			tok := token()
			for {
				ok, err := c.SetNX(ctx, key, tok, ttl).Result()
				if err != nil {
					return nil, err
				}
				if ok {
					return func(ctx context.Context) error { return rawRelease.Run(ctx, c, []string{key}, tok).Err() }, nil
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Millisecond):
				}
			}
		}
	}},
	{"dlock", func(tb testing.TB, addr, key string) waitFunc {
		// Default options: wake-on-release, polling every 50-100ms as a
		// fallback.
		l := newDlock(tb, newClient(tb, addr))
		return func(ctx context.Context) (releaseFunc, error) {
			lock, err := l.Acquire(ctx, key, ttl)
			if err != nil {
				return nil, err
			}
			return lock.Release, nil
		}
	}},
	{"redsync", redsyncWaiter()},
	{"redsync-1ms", redsyncWaiter(redsync.WithRetryDelay(time.Millisecond))},
	{"bsm-exp", bsmWaiter(func() redislock.RetryStrategy {
		// The exponential backoff of bsm's docs, from their recommended
		// 16ms minimum; capped at 1s so a waiter is never parked for long.
		return redislock.ExponentialBackoff(16*time.Millisecond, time.Second)
	})},
	{"bsm-1ms", bsmWaiter(func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) })},
	{"rueidislock", func(tb testing.TB, addr, key string) waitFunc {
		// Waits on client-side-caching invalidations of the key.
		l := newRueidislock(tb, addr)
		return func(ctx context.Context) (releaseFunc, error) {
			_, cancel, err := l.WithContext(ctx, key)
			if err != nil {
				return nil, err
			}
			return func(context.Context) error { cancel(); return nil }, nil
		}
	}},
}

// redsyncWaiter waits with redsync's LockContext, which gives up after 32
// tries (about 5s at the default 50-250ms delay); the waiter then calls it
// again, so the wait goes on until ctx ends, as the others' do.
func redsyncWaiter(opts ...redsync.Option) func(tb testing.TB, addr, key string) waitFunc {
	return func(tb testing.TB, addr, key string) waitFunc {
		rs := redsync.New(goredis.NewPool(newClient(tb, addr)))
		return func(ctx context.Context) (releaseFunc, error) {
			for {
				m := rs.NewMutex(key, append([]redsync.Option{redsync.WithExpiry(ttl)}, opts...)...)
				err := m.LockContext(ctx)
				if err == nil {
					return func(ctx context.Context) error {
						if ok, err := m.UnlockContext(ctx); !ok {
							return errors.Join(errBusy, err)
						}
						return nil
					}, nil
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				var taken *redsync.ErrTaken
				if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
					return nil, err
				}
			}
		}
	}
}

func bsmWaiter(strategy func() redislock.RetryStrategy) func(tb testing.TB, addr, key string) waitFunc {
	return func(tb testing.TB, addr, key string) waitFunc {
		lc := redislock.New(newClient(tb, addr))
		return func(ctx context.Context) (releaseFunc, error) {
			for {
				// Obtain gives up at its context's deadline, or after the
				// TTL when there is none; go on until ctx ends.
				lock, err := lc.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: strategy()})
				if err == nil {
					return lock.Release, nil
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
					return nil, err
				}
			}
		}
	}
}

// arena is the bookkeeping of one contended window: who holds the lock
// (by the benchmark's own account, to catch overlaps), hand-offs and waits.
type arena struct {
	mu           sync.Mutex
	holder       int // goroutine holding the lock, -1 when none
	last         int // the latest holder, -1 at the start
	releaseStart time.Time
	changed      chan struct{} // closed and replaced at every acquisition

	acquisitions, handoffs, overlaps, errs int
	counts                                 []int
	handoff, waits                         []time.Duration
}

func newArena(n int) *arena {
	return &arena{holder: -1, last: -1, counts: make([]int, n), changed: make(chan struct{})}
}

// acquired records that g got the lock at now after waiting since start.
func (a *arena) acquired(g int, start, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.holder != -1 {
		a.overlaps++ // the server granted a lock that someone still held
	}
	if a.last != -1 && a.last != g {
		a.handoffs++
		a.handoff = append(a.handoff, now.Sub(a.releaseStart))
	}
	a.acquisitions++
	a.counts[g]++
	a.waits = append(a.waits, now.Sub(start))
	a.holder, a.last = g, g
	close(a.changed)
	a.changed = make(chan struct{})
}

// releasing records that g starts its release now.
func (a *arena) releasing(g int) {
	a.mu.Lock()
	a.holder = -1
	a.releaseStart = time.Now()
	a.mu.Unlock()
}

// stepAside waits until a goroutine other than g has taken the lock.
func (a *arena) stepAside(ctx context.Context, g int) {
	for {
		a.mu.Lock()
		last, ch := a.last, a.changed
		a.mu.Unlock()
		if last != g {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// reset starts the measured part of the window.
func (a *arena) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acquisitions, a.handoffs, a.overlaps, a.errs = 0, 0, 0, 0
	clear(a.counts)
	a.handoff, a.waits = a.handoff[:0], a.waits[:0]
}

func (a *arena) failed() {
	a.mu.Lock()
	a.errs++
	a.mu.Unlock()
}

// BenchmarkC1: 16 goroutines, each with its own client, on one key; a
// holder releases at once and tries again at once.
func BenchmarkC1(b *testing.B) { benchContended(b, 0) }

// BenchmarkC2: as C1, but a holder keeps the lock 1ms and after releasing
// steps aside until another goroutine holds it: every acquisition is a
// hand-off to a parked waiter.
func BenchmarkC2(b *testing.B) { benchContended(b, time.Millisecond) }

func benchContended(b *testing.B, hold time.Duration) {
	for _, impl := range contendeds {
		b.Run(impl.name, func(b *testing.B) {
			for range b.N {
				contend(b, impl, hold)
			}
		})
	}
}

// contend runs one window: warm up, then measure for `window`.
func contend(b *testing.B, impl contended, hold time.Duration) {
	admin := newClient(b, redisAddr)
	key := freshKey("C")
	waiters := make([]waitFunc, contenders)
	for g := range waiters {
		waiters[g] = impl.newWaiter(b, redisAddr, key)
	}
	a := newArena(contenders)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for g, wait := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				release, err := wait(ctx)
				if err != nil {
					if ctx.Err() == nil {
						a.failed()
						b.Logf("%s: goroutine %d: %v", impl.name, g, err)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				a.acquired(g, start, time.Now())
				if hold > 0 {
					time.Sleep(hold)
				}
				a.releasing(g)
				if err := release(context.WithoutCancel(ctx)); err != nil {
					a.failed()
					b.Logf("%s: goroutine %d: release: %v", impl.name, g, err)
				}
				if hold > 0 {
					a.stepAside(ctx, g)
				}
			}
		}()
	}
	b.StopTimer()
	time.Sleep(window / 4) // warm-up: connections, subscriptions
	a.reset()
	s0, c0 := serverCPU(b, admin), processCPU()
	r0 := reads(b, admin) // after INFO cpu, which is not one of the reads counted
	b.StartTimer()
	t0 := time.Now()
	time.Sleep(window)
	elapsed := time.Since(t0)
	b.StopTimer()
	r1, s1, c1 := reads(b, admin), serverCPU(b, admin), processCPU()
	a.mu.Lock()
	acq, handoffs, overlaps, errs := a.acquisitions, a.handoffs, a.overlaps, a.errs
	counts := slices.Clone(a.counts)
	handoff, waits := slices.Clone(a.handoff), slices.Clone(a.waits)
	a.mu.Unlock()
	cancel()
	wg.Wait()

	slices.Sort(handoff)
	slices.Sort(waits)
	b.ReportMetric(float64(acq)/elapsed.Seconds(), "acq/s")
	b.ReportMetric(us(pct(handoff, 50)), "handoff-p50-us")
	b.ReportMetric(us(pct(handoff, 99)), "handoff-p99-us")
	if acq > 0 {
		b.ReportMetric(float64(handoffs)/float64(acq), "handoff-share")
	}
	b.ReportMetric(float64(slices.Min(counts)), "acq-min")
	b.ReportMetric(float64(slices.Max(counts)), "acq-max")
	b.ReportMetric(ms(pct(waits, 50)), "wait-p50-ms")
	b.ReportMetric(ms(pct(waits, 100)), "wait-max-ms")
	// The second INFO is one of the reads counted.
	if handoffs > 0 {
		b.ReportMetric(float64(r1-r0-1)/float64(handoffs), "rt/handoff")
	}
	if acq > 0 {
		b.ReportMetric(float64(r1-r0-1)/float64(acq), "rt/acq")
	}
	if acq > 0 {
		// Where C1's time goes on a machine whose cores the clients and
		// the server share: CPU per acquisition on each side.
		b.ReportMetric(us(c1-c0)/float64(acq), "client-cpu-us/acq")
		b.ReportMetric(us(s1-s0)/float64(acq), "server-cpu-us/acq")
	}
	b.ReportMetric(float64(overlaps), "overlaps")
	b.ReportMetric(float64(errs), "errors")
	if overlaps > 0 {
		b.Errorf("%s: %d overlapping holders", impl.name, overlaps)
	}
}

// processCPU returns the CPU time (user + system) this process has used: the
// benchmark's clients.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time the Redis server has used (INFO cpu).
func serverCPU(tb testing.TB, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					tb.Fatal(err)
				}
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
