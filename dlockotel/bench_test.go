package dlockotel_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
)

// observers are the configurations whose cost the benchmarks measure:
// OpenTelemetry's no-op providers (a program that installed none), and
// the SDK's, recording every metric and sampling every span (exported
// nowhere: the exporter's cost is not the Observer's).
func observers(b *testing.B) map[string]*dlockotel.Observer {
	sdkMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	sdkTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() {
		sdkMP.Shutdown(context.Background())
		sdkTP.Shutdown(context.Background())
	})
	out := map[string]*dlockotel.Observer{}
	for name, opts := range map[string][]dlockotel.Option{
		"noop": {dlockotel.WithMeterProvider(metricnoop.NewMeterProvider()), dlockotel.WithTracerProvider(tracenoop.NewTracerProvider())},
		"sdk":  {dlockotel.WithMeterProvider(sdkMP), dlockotel.WithTracerProvider(sdkTP)},
	} {
		o, err := dlockotel.New(opts...)
		if err != nil {
			b.Fatal(err)
		}
		out[name] = o
	}
	return out
}

// BenchmarkObserve: the Observer's cost per event, over the events of an
// uncontended lock's life (attempt, granted, extended, released).
func BenchmarkObserve(b *testing.B) {
	for _, name := range []string{"noop", "sdk"} {
		o := observers(b)[name]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			var fence uint64
			for b.Loop() {
				fence++
				o.Observe(ctx, dlock.Event{Kind: dlock.EventAttempt, Key: "k", Attempts: 1})
				o.Observe(ctx, dlock.Event{Kind: dlock.EventGranted, Key: "k", Fence: fence, Attempts: 1, Wait: time.Millisecond})
				o.Observe(ctx, dlock.Event{Kind: dlock.EventExtended, Key: "k", Fence: fence, Took: time.Millisecond})
				o.Observe(ctx, dlock.Event{Kind: dlock.EventReleased, Key: "k", Fence: fence, Hold: time.Second, Took: time.Millisecond})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N), "ns/event")
		})
	}
}

// BenchmarkCycle: one Acquire and Release against a memory Locker, with
// no observer, an empty one, and the Observer.
func BenchmarkCycle(b *testing.B) {
	obs := observers(b)
	for _, c := range []struct {
		name      string
		observers []func(context.Context, dlock.Event)
	}{
		{"none", nil},
		{"empty", []func(context.Context, dlock.Event){func(context.Context, dlock.Event) {}}},
		{"otel-noop", []func(context.Context, dlock.Event){obs["noop"].Observe}},
		{"otel-sdk", []func(context.Context, dlock.Event){obs["sdk"].Observe}},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := newMem(c.observers...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := dlock.Acquire(ctx, m, "k", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
