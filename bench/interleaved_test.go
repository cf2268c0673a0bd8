package bench

import (
	"context"
	"testing"
	"time"
)

// The one-goroutine groups (A and E) time one round trip after another,
// and on a small shared machine a round trip's cost can change by a factor
// of two for seconds at a time (load elsewhere, or where the scheduler puts
// the client and the server). Measured one after the other, two
// implementations can land in different such phases. BenchmarkIA and
// BenchmarkIE therefore run each implementation interleaved with the raw
// baseline, in blocks of interleaveBlock cycles on one goroutine (each
// with its own client), and report the ratio of their cycle rates over the
// whole run, x-raw: a phase then hits both alike.
const interleaveBlock = 25

// BenchmarkIA is A, interleaved with raw.
func BenchmarkIA(b *testing.B) {
	for _, s := range singles[1:] {
		b.Run(s.name, func(b *testing.B) {
			base := singles[0].setup(b, newClient(b, redisAddr))(freshKey("IA"))
			impl := s.setup(b, newClient(b, redisAddr))(freshKey("IA"))
			interleave(b, base, impl)
		})
	}
}

// BenchmarkIE is E, interleaved with raw.
func BenchmarkIE(b *testing.B) {
	for _, impl := range pgImpls[1:] {
		b.Run(impl.name, func(b *testing.B) {
			interleave(b, pgImpls[0].setup(b), impl.setup(b))
		})
	}
}

// interleave runs base and impl in alternating blocks until each ran b.N
// cycles (which of the two goes first alternates too) and reports impl's
// cycles/s divided by base's.
func interleave(b *testing.B, base, impl cycleFunc) {
	ctx := context.Background()
	run := func(f cycleFunc, n int) time.Duration {
		start := time.Now()
		for range n {
			if err := f(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	run(base, 200) // warm-up
	run(impl, 200)
	b.ResetTimer()
	var tBase, tImpl time.Duration
	for done, i := 0, 0; done < b.N; i++ {
		n := min(interleaveBlock, b.N-done)
		if i%2 == 0 {
			tBase += run(base, n)
			tImpl += run(impl, n)
		} else {
			tImpl += run(impl, n)
			tBase += run(base, n)
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric(tBase.Seconds()/tImpl.Seconds(), "x-raw")
}
