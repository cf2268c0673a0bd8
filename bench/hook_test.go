package bench

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	dlockredis "github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
)

// hook is one configuration of dlock's uncontended cycle (TryAcquire and
// Release on one redislock.Locker) whose own cost BenchmarkHook measures
// against the same cycle with no observer at all.
type hook struct {
	name string
	opts func(tb testing.TB) []dlockredis.Option
	// redlock, when set, makes the row Redlock's instead: the cycle over
	// B's five servers, with these options, against the same cycle with
	// no observer.
	redlock []redlock.Option
}

// discard is a logger that drops everything: with it the Locker has no
// observer (driver.NewEvents makes none of it), so no event is built.
var discard = slog.New(slog.DiscardHandler)

var hooks = []hook{
	// The baseline against itself: the method's own error.
	{"none", func(testing.TB) []dlockredis.Option { return nil }, nil},
	// The default configuration, as in A: slog.Default()'s handler at Info,
	// so the logger's observer only asks it whether Debug is enabled.
	{"default-logger", nil, nil},
	{"noop", func(testing.TB) []dlockredis.Option {
		return []dlockredis.Option{dlockredis.WithObserver(func(context.Context, dlock.Event) {})}
	}, nil},
	// dlockotel with the SDK's providers: every metric recorded (a manual
	// reader, never collected) and every span sampled (exported nowhere:
	// the exporter's cost is not the hook's).
	{"otel", func(tb testing.TB) []dlockredis.Option {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		tb.Cleanup(func() {
			mp.Shutdown(context.Background())
			tp.Shutdown(context.Background())
		})
		o, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
		if err != nil {
			tb.Fatal(err)
		}
		return []dlockredis.Option{dlockredis.WithObserver(o.Observe)}
	}, nil},
	{"holder", func(testing.TB) []dlockredis.Option {
		return []dlockredis.Option{dlockredis.WithHolderInfo("bench")}
	}, nil},
	{"redlock-holder", nil, []redlock.Option{redlock.WithHolderInfo("bench")}},
}

// BenchmarkHook: dlock's uncontended cycle with an observer or the holder
// record, interleaved in blocks of interleaveBlock cycles on one client
// with the cycle that has no observer at all (a logger that discards);
// redlock-holder is Redlock's cycle over B's five servers with and without
// WithHolderInfo.
// x-none is the cycle time over the baseline's in the same blocks,
// p50-x-none the median's, and allocs/cycle and base-allocs/cycle count
// each side's heap allocations (runtime.MemStats, around each block).
func BenchmarkHook(b *testing.B) {
	for _, h := range hooks {
		b.Run(h.name, func(b *testing.B) {
			if h.redlock != nil {
				cs := redlockClients(b)
				base := tryCycle(newRedlock(b, cs, redlock.WithLogger(discard)), freshKey("HB"))
				impl := tryCycle(newRedlock(b, cs, append([]redlock.Option{redlock.WithLogger(discard)}, h.redlock...)...), freshKey("HB"))
				interleaveAllocs(b, base, impl)
				return
			}
			c := newClient(b, redisAddr)
			base := tryCycle(newDlock(b, c, dlockredis.WithLogger(discard)), freshKey("H"))
			opts := []dlockredis.Option{dlockredis.WithLogger(discard)}
			if h.opts == nil {
				opts = nil // the default logger
			} else {
				opts = append(opts, h.opts(b)...)
			}
			impl := tryCycle(newDlock(b, c, opts...), freshKey("H"))
			interleaveAllocs(b, base, impl)
		})
	}
}

func newRedlock(b *testing.B, cs []*redis.Client, opts ...redlock.Option) *redlock.Locker {
	ucs := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		ucs[i] = c
	}
	l, err := redlock.New(ucs, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() }) // before the clients: lets the last release finish
	return l
}

// interleaveAllocs is interleave, reporting cycle time ratios (impl's over
// base's: above 1 is slower) and each side's allocations per cycle.
func interleaveAllocs(b *testing.B, base, impl cycleFunc) {
	ctx := context.Background()
	var ms runtime.MemStats
	mallocs := func() uint64 { runtime.ReadMemStats(&ms); return ms.Mallocs }
	var allocs [2]uint64
	run := func(side int, f cycleFunc, lat []time.Duration) {
		m0 := mallocs()
		for i := range lat {
			start := time.Now()
			if err := f(ctx); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(start)
		}
		allocs[side] += mallocs() - m0
	}
	warm := make([]time.Duration, warmCycles)
	run(0, base, warm)
	run(1, impl, warm)
	allocs = [2]uint64{}
	latBase, latImpl := make([]time.Duration, b.N), make([]time.Duration, b.N)
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		n := min(interleaveBlock, b.N-done)
		if i%2 == 0 {
			run(0, base, latBase[done:done+n])
			run(1, impl, latImpl[done:done+n])
		} else {
			run(1, impl, latImpl[done:done+n])
			run(0, base, latBase[done:done+n])
		}
		done += n
	}
	b.StopTimer()
	var tBase, tImpl time.Duration
	for i := range latBase {
		tBase += latBase[i]
		tImpl += latImpl[i]
	}
	b.ReportMetric(tImpl.Seconds()/tBase.Seconds(), "x-none")
	b.ReportMetric(us(tBase)/float64(b.N), "base-us")
	b.ReportMetric(us(tImpl)/float64(b.N), "us/cycle")
	b.ReportMetric(float64(allocs[1])/float64(b.N), "allocs/cycle")
	b.ReportMetric(float64(allocs[0])/float64(b.N), "base-allocs/cycle")
	slices.Sort(latBase)
	slices.Sort(latImpl)
	b.ReportMetric(float64(pct(latImpl, 50))/float64(pct(latBase, 50)), "p50-x-none")
}
