package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The one-goroutine groups (A, B and E) time one round trip after another,
// and on a small shared machine a round trip's cost can change by a factor
// of two for seconds at a time (load elsewhere, or where the scheduler puts
// the client and the server). Measured one after the other, two
// implementations can land in different such phases. BenchmarkIA, IB and
// IE therefore run each implementation interleaved with the raw
// baseline, in blocks of interleaveBlock cycles on one goroutine, and
// report the ratio of their cycle rates over the whole run, x-raw: a phase
// then hits both alike.
//
// Both sides share one client (A), five (B) or one pool (E), so they talk
// to the servers over the same connections. With a pool each, E's two
// sides were served by two PostgreSQL backend processes, which the
// scheduler placed differently for seconds at a time: the per-pass ratios
// then spread over 0.4-1.5x, where they now stay within about ±10%. The
// first row, the baseline's own, is it interleaved with itself: its
// distance from 1.00x is the method's own error.
const interleaveBlock = 25

// BenchmarkIA is A, interleaved with raw.
func BenchmarkIA(b *testing.B) {
	for _, s := range singles {
		b.Run(s.name, func(b *testing.B) {
			c := newClient(b, redisAddr)
			base := singles[0].setup(b, c)(freshKey("IA"))
			impl := s.setup(b, c)(freshKey("IA"))
			interleave(b, base, impl)
		})
	}
}

// BenchmarkIB is B, interleaved with the raw fan-out over the same five
// clients.
func BenchmarkIB(b *testing.B) {
	for _, impl := range redlocks {
		b.Run(impl.name, func(b *testing.B) {
			cs := redlockClients(b)
			interleave(b, redlocks[0].setup(b, cs), impl.setup(b, cs))
		})
	}
}

// BenchmarkIE is E, interleaved with raw.
func BenchmarkIE(b *testing.B) {
	for _, impl := range pgImpls {
		b.Run(impl.name, func(b *testing.B) {
			pool := newPool(b)
			interleave(b, pgImpls[0].setup(b, pool), impl.setup(b, pool))
		})
	}
}

// BenchmarkID is D interleaved: the 64 goroutines, sharing one client, run
// the raw baseline and impl in alternating windows of idWindow (which of
// the two goes first alternates too), each goroutine on its own key for
// each, and x-raw is impl's cycle rate over the baseline's. D is bound by
// the machine's CPU, and its separate passes spread over ±15%; here the
// windows of both share the machine's phases. A cycle still running when
// its window ends counts for neither, and takes from the next window's
// machine time: at most one cycle per goroutine, alike for both.
func BenchmarkID(b *testing.B) {
	const rounds, idWindow, goroutines = 6, 100 * time.Millisecond, 64
	for _, s := range singles {
		b.Run(s.name, func(b *testing.B) {
			c := newClient(b, redisAddr)
			mk := [2]func(string) cycleFunc{singles[0].setup(b, c), s.setup(b, c)}
			var phase atomic.Int32 // 0 the baseline, 1 impl, 2 stop
			var done [2]atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				cycles := [2]cycleFunc{mk[0](freshKey("ID")), mk[1](freshKey("ID"))}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					for {
						p := phase.Load()
						if p == 2 {
							return
						}
						if err := cycles[p](ctx); err != nil {
							b.Error(err)
							phase.Store(2)
							return
						}
						done[p].Add(1)
					}
				}()
			}
			window := func(k int32) (int64, time.Duration) {
				n0, start := done[k].Load(), time.Now()
				phase.Store(k)
				time.Sleep(idWindow)
				return done[k].Load() - n0, time.Since(start)
			}
			window(0) // warm-up: connections, scripts
			window(1)
			var n [2]int64
			var took [2]time.Duration
			b.ResetTimer()
			for i := range rounds * b.N {
				for j := range 2 {
					k := int32((i + j) % 2)
					dn, dt := window(k)
					n[k] += dn
					took[k] += dt
				}
			}
			b.StopTimer()
			phase.Store(2)
			wg.Wait()
			base, impl := float64(n[0])/took[0].Seconds(), float64(n[1])/took[1].Seconds()
			b.ReportMetric(impl/base, "x-raw")
		})
	}
}

// interleave runs base and impl in alternating blocks until each ran b.N
// cycles (which of the two goes first alternates too) and reports impl's
// cycles/s divided by base's, x-raw, and impl's median cycle time divided
// by base's, p50-x-raw, and base's mean cycle time, base-us.
func interleave(b *testing.B, base, impl cycleFunc) {
	ctx := context.Background()
	run := func(f cycleFunc, lat []time.Duration) { // one cycle per element
		for i := range lat {
			start := time.Now()
			if err := f(ctx); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(start)
		}
	}
	warm := make([]time.Duration, 200)
	run(base, warm)
	run(impl, warm)
	latBase, latImpl := make([]time.Duration, b.N), make([]time.Duration, b.N)
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		n := min(interleaveBlock, b.N-done)
		if i%2 == 0 {
			run(base, latBase[done:done+n])
			run(impl, latImpl[done:done+n])
		} else {
			run(impl, latImpl[done:done+n])
			run(base, latBase[done:done+n])
		}
		done += n
	}
	b.StopTimer()
	var tBase, tImpl time.Duration
	for i := range latBase {
		tBase += latBase[i]
		tImpl += latImpl[i]
	}
	b.ReportMetric(tBase.Seconds()/tImpl.Seconds(), "x-raw")
	b.ReportMetric(us(tBase)/float64(b.N), "base-us")
	slices.Sort(latBase)
	slices.Sort(latImpl)
	b.ReportMetric(float64(pct(latImpl, 50))/float64(pct(latBase, 50)), "p50-x-raw")
}
