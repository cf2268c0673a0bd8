package bench

import (
	"context"
	"slices"
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

// interleave runs base and impl in alternating blocks until each ran b.N
// cycles (which of the two goes first alternates too) and reports impl's
// cycles/s divided by base's, x-raw, and impl's median cycle time divided
// by base's, p50-x-raw.
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
	slices.Sort(latBase)
	slices.Sort(latImpl)
	b.ReportMetric(float64(pct(latImpl, 50))/float64(pct(latBase, 50)), "p50-x-raw")
}
