package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

const contenders = 16

// releaseFunc gives back a lock that a waiter obtained.
type releaseFunc func(ctx context.Context) error

// waitFunc waits until it holds key or ctx ends.
type waitFunc func(ctx context.Context) (releaseFunc, error)

// turns holds dlock-turns' channel of turns for each key.
var turns sync.Map

// contended is one implementation's waiting acquire; newWaiter is called
// once per goroutine, each with its own client.
type contended struct {
	name      string
	newWaiter func(tb testing.TB, addr, key string) waitFunc
	// notGoRedis: its clients are not go-redis's, so the commands they send
	// are not counted (the server's count still is).
	notGoRedis bool
}

var contendeds = []contended{
	{name: "raw-poll-1ms", newWaiter: func(tb testing.TB, addr, key string) waitFunc {
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
	{name: "dlock", newWaiter: func(tb testing.TB, addr, key string) waitFunc {
		// Default options: wake-on-release, polling every 50-100ms as a
		// fallback.
		l := newDlock(tb, newClient(tb, addr))
		return func(ctx context.Context) (releaseFunc, error) {
			lock, err := dlock.Acquire(ctx, l, key, ttl)
			if err != nil {
				return nil, err
			}
			return lock.Release, nil
		}
	}},
	{name: "dlock-turns", newWaiter: func(tb testing.TB, addr, key string) waitFunc {
		// Not a lock anyone would use: the goroutines take turns through
		// a Go channel, each making one TryAcquire (which succeeds, as the
		// previous turn has released) and a Release. It is the ceiling of
		// every design whose next attempt is sent once a release has
		// returned (the releaser taking the key again, or a wake-up that
		// cost nothing), with dlock's scripts.
		l := newDlock(tb, newClient(tb, addr))
		v, _ := turns.LoadOrStore(key, make(chan struct{}, 1))
		turn := v.(chan struct{})
		select {
		case turn <- struct{}{}: // the first turn
		default:
		}
		return func(ctx context.Context) (releaseFunc, error) {
			select {
			case <-turn:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			lock, err := l.TryAcquire(ctx, key, ttl)
			if err != nil {
				turn <- struct{}{}
				return nil, err
			}
			return func(ctx context.Context) error {
				err := lock.Release(ctx)
				turn <- struct{}{}
				return err
			}, nil
		}
	}},
	{name: "redsync", newWaiter: redsyncWaiter()},
	{name: "redsync-1ms", newWaiter: redsyncWaiter(redsync.WithRetryDelay(time.Millisecond))},
	{name: "bsm-exp", newWaiter: bsmWaiter(func() redislock.RetryStrategy {
		// The exponential backoff of bsm's docs, from their recommended
		// 16ms minimum; capped at 1s so a waiter is never parked for long.
		return redislock.ExponentialBackoff(16*time.Millisecond, time.Second)
	})},
	{name: "bsm-1ms", newWaiter: bsmWaiter(func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) })},
	{name: "rueidislock", newWaiter: func(tb testing.TB, addr, key string) waitFunc {
		// Waits on client-side-caching invalidations of the key.
		l := newRueidislock(tb, addr)
		return func(ctx context.Context) (releaseFunc, error) {
			_, cancel, err := l.WithContext(ctx, key)
			if err != nil {
				return nil, err
			}
			return func(context.Context) error { cancel(); return nil }, nil
		}
	}, notGoRedis: true},
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
	releaseRT, wonRT                       []time.Duration // a release's round trips; the hand-off's winning attempt's
}

func newArena(n int) *arena {
	return &arena{holder: -1, last: -1, counts: make([]int, n), changed: make(chan struct{})}
}

// acquired records that g got the lock at now after waiting since start;
// won is the round trip of the command that won it (0: not measured).
func (a *arena) acquired(g int, start, now time.Time, won time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.holder != -1 {
		a.overlaps++ // the server granted a lock that someone still held
	}
	if a.last != -1 && a.last != g {
		a.handoffs++
		a.handoff = append(a.handoff, now.Sub(a.releaseStart))
		if won > 0 {
			a.wonRT = append(a.wonRT, won)
		}
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

// released records the round trips of a release (0: not measured).
func (a *arena) released(rt time.Duration) {
	if rt > 0 {
		a.mu.Lock()
		a.releaseRT = append(a.releaseRT, rt)
		a.mu.Unlock()
	}
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
	a.releaseRT, a.wonRT = a.releaseRT[:0], a.wonRT[:0]
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

// BenchmarkPing is the round trip that C2's hand-off is measured in: one
// goroutine sends PING after PING on one client (raw). idle-1ms times each
// PING after a 1ms sleep, as a C2 release follows a 1ms hold: on a machine
// whose idle CPUs halt, a round trip after a pause pays their wake-up,
// which a loop does not. run.sh runs both beside each pass of C1 and C2.
func BenchmarkPing(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		c := newClient(b, redisAddr)
		measure(b, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	})
	b.Run("idle-1ms", func(b *testing.B) {
		c := newClient(b, redisAddr)
		ctx := context.Background()
		lat := make([]time.Duration, b.N)
		for i := range lat {
			time.Sleep(time.Millisecond)
			t0 := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		slices.Sort(lat)
		b.ReportMetric(us(pct(lat, 50)), "p50-us")
		b.ReportMetric(us(pct(lat, 99)), "p99-us")
	})
}

func benchContended(b *testing.B, hold time.Duration) {
	for _, impl := range contendeds {
		b.Run(impl.name, func(b *testing.B) {
			for range b.N {
				contend(b, impl, hold)
			}
		})
	}
}

// contend runs one window of impl and reports its figures.
func contend(b *testing.B, impl contended, hold time.Duration) {
	w := runWindow(b, impl, hold, window)
	slices.Sort(w.handoff)
	slices.Sort(w.waits)
	b.ReportMetric(w.rate(), "acq/s")
	b.ReportMetric(us(pct(w.handoff, 50)), "handoff-p50-us")
	b.ReportMetric(us(pct(w.handoff, 99)), "handoff-p99-us")
	if w.acq > 0 {
		b.ReportMetric(float64(w.handoffs)/float64(w.acq), "handoff-share")
	}
	// Fairness: each goroutine's share against the mean, the longest wait
	// against the median.
	mean := float64(w.acq) / contenders
	b.ReportMetric(float64(slices.Min(w.counts)), "acq-min")
	b.ReportMetric(float64(slices.Max(w.counts)), "acq-max")
	b.ReportMetric(mean, "acq-mean")
	if mean > 0 {
		b.ReportMetric(float64(slices.Min(w.counts))/mean, "acq-min-x-mean")
	}
	b.ReportMetric(ms(pct(w.waits, 50)), "wait-p50-ms")
	b.ReportMetric(ms(pct(w.waits, 100)), "wait-max-ms")
	if p50 := pct(w.waits, 50); p50 > 0 {
		b.ReportMetric(float64(pct(w.waits, 100))/float64(p50), "wait-max-x-p50")
	}
	// A hand-off's parts: the release's round trips, and the winning
	// attempt's, as the clients timed them (go-redis clients only).
	if len(w.releaseRT) > 0 && len(w.wonRT) > 0 {
		slices.Sort(w.releaseRT)
		slices.Sort(w.wonRT)
		b.ReportMetric(us(pct(w.releaseRT, 50)), "release-rt-p50-us")
		b.ReportMetric(us(pct(w.wonRT, 50)), "won-rt-p50-us")
	}
	if w.handoffs > 0 {
		b.ReportMetric(float64(w.reads)/float64(w.handoffs), "rt/handoff")
		b.ReportMetric(float64(w.commands)/float64(w.handoffs), "cmd/handoff")
		if !impl.notGoRedis {
			b.ReportMetric(float64(w.sent)/float64(w.handoffs), "sent/handoff")
		}
	}
	if w.acq > 0 {
		b.ReportMetric(float64(w.reads)/float64(w.acq), "rt/acq")
		// Where C1's time goes on a machine whose cores the clients and
		// the server share: CPU per acquisition on each side.
		b.ReportMetric(us(w.clientCPU)/float64(w.acq), "client-cpu-us/acq")
		b.ReportMetric(us(w.serverCPU)/float64(w.acq), "server-cpu-us/acq")
	}
	b.ReportMetric(float64(w.overlaps), "overlaps")
	b.ReportMetric(float64(w.errs), "errors")
}

// windowStats are one contended window's figures.
type windowStats struct {
	acq, handoffs, overlaps, errs int
	elapsed                       time.Duration
	counts                        []int
	handoff, waits                []time.Duration
	releaseRT, wonRT              []time.Duration
	reads                         int64 // round trips
	commands                      int64 // as the server counts them, with those its scripts run
	sent                          int64 // commands the clients sent (go-redis clients only)
	clientCPU, serverCPU          time.Duration
}

func (w *windowStats) rate() float64 { return float64(w.acq) / w.elapsed.Seconds() }

// runWindow runs contenders goroutines of impl, each with its own client,
// on a fresh key: it warms up for a quarter of length, then measures for
// length. The clients are closed when it returns. Overlapping holders fail
// the benchmark.
func runWindow(b *testing.B, impl contended, hold, length time.Duration) windowStats {
	wtb := &windowTB{TB: b}
	defer wtb.close()
	admin := newClient(wtb, redisAddr)
	key := freshKey("C")
	waiters := make([]waitFunc, contenders)
	for g := range waiters {
		waiters[g] = impl.newWaiter(wtb, redisAddr, key)
	}
	a := newArena(contenders)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for g, wait := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waitCtx, rt := withRoundTrips(ctx)
			for ctx.Err() == nil {
				start := time.Now()
				release, err := wait(waitCtx)
				if err != nil {
					if ctx.Err() == nil {
						a.failed()
						b.Logf("%s: goroutine %d: %v", impl.name, g, err)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				a.acquired(g, start, time.Now(), rt.last())
				if hold > 0 {
					time.Sleep(hold)
				}
				a.releasing(g)
				relCtx := rt.releasing(context.WithoutCancel(ctx))
				if err := release(relCtx); err != nil {
					a.failed()
					b.Logf("%s: goroutine %d: release: %v", impl.name, g, err)
				}
				a.released(rt.released())
				if hold > 0 {
					a.stepAside(ctx, g)
				}
			}
		}()
	}
	b.StopTimer()
	time.Sleep(length / 4) // warm-up: connections, subscriptions
	a.reset()
	s0, c0 := serverCPU(b, admin), processCPU()
	st0 := stats(b, admin) // after INFO cpu, which is not counted then
	sent0 := sent.Load()
	b.StartTimer()
	t0 := time.Now()
	time.Sleep(length)
	elapsed := time.Since(t0)
	b.StopTimer()
	sent1 := sent.Load()
	st1, s1, c1 := stats(b, admin), serverCPU(b, admin), processCPU()
	a.mu.Lock()
	w := windowStats{
		acq: a.acquisitions, handoffs: a.handoffs, overlaps: a.overlaps, errs: a.errs,
		elapsed: elapsed, counts: slices.Clone(a.counts),
		handoff: slices.Clone(a.handoff), waits: slices.Clone(a.waits),
		releaseRT: slices.Clone(a.releaseRT), wonRT: slices.Clone(a.wonRT),
		// Less the admin's: the second INFO stats is one of the reads
		// counted, the first one of the commands.
		reads: st1.reads - st0.reads - 1, commands: st1.commands - st0.commands - 1,
		sent:      sent1 - sent0,
		clientCPU: c1 - c0, serverCPU: s1 - s0,
	}
	a.mu.Unlock()
	cancel()
	wg.Wait()
	if w.overlaps > 0 {
		b.Errorf("%s: %d overlapping holders", impl.name, w.overlaps)
	}
	return w
}

// windowTB is a benchmark as the clients of one window see it: their
// cleanups run when the window ends, not with the benchmark, so that a
// window's idle clients (and Lockers' subscriptions) do not linger beside
// the next one's.
type windowTB struct {
	testing.TB
	cleanups []func()
}

func (w *windowTB) Cleanup(f func()) { w.cleanups = append(w.cleanups, f) }

func (w *windowTB) close() {
	for i := len(w.cleanups) - 1; i >= 0; i-- {
		w.cleanups[i]()
	}
}

// BenchmarkIC1 is C1 interleaved: dlock against each peer in alternating
// windows of iwindow (dlock first in every other round), and the ratio of
// their acquisition rates over all the rounds, x-peer. On this machine one
// 2s window's throughput swings by ±25% with the machine's phase, which
// lasts seconds: C1's separate windows, seconds apart, then compare
// different phases, where the rounds here share them.
func BenchmarkIC1(b *testing.B) {
	const rounds, iwindow = 6, 400 * time.Millisecond
	var mine contended
	for _, c := range contendeds {
		if c.name == "dlock" {
			mine = c
		}
	}
	for _, peer := range contendeds {
		if peer.name == "dlock" || strings.HasPrefix(peer.name, "raw") {
			continue
		}
		b.Run(peer.name, func(b *testing.B) {
			var acq [2]int
			var took [2]time.Duration
			for i := range rounds * b.N {
				for j := range 2 {
					k := (i + j) % 2 // 0: dlock, 1: the peer
					w := runWindow(b, [2]contended{mine, peer}[k], 0, iwindow)
					acq[k] += w.acq
					took[k] += w.elapsed
				}
			}
			dlockRate := float64(acq[0]) / took[0].Seconds()
			b.ReportMetric(dlockRate/(float64(acq[1])/took[1].Seconds()), "x-peer")
		})
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
	cpu := infoFields(tb, c, "cpu")
	return time.Duration((cpu.float(tb, "used_cpu_sys") + cpu.float(tb, "used_cpu_user")) * float64(time.Second))
}
