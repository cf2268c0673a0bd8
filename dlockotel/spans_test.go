package dlockotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
)

// recorded is an Observer over the SDK's in-memory span exporter and a
// manual metric reader.
type recorded struct {
	obs    *dlockotel.Observer
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newRecorded(t *testing.T, opts ...dlockotel.Option) *recorded {
	r := &recorded{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		r.tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	obs, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithTracerProvider(r.tp), dlockotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.obs = obs
	return r
}

// byName returns the ended spans named name.
func (r *recorded) byName(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span named name.
func (r *recorded) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	ss := r.byName(name)
	if len(ss) != 1 {
		t.Fatalf("%d spans %s, want 1 (all: %v)", len(ss), name, names(r.spans.GetSpans()))
	}
	return ss[0]
}

func names(ss tracetest.SpanStubs) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// sum returns the sum of int64 metric name's data points.
func (r *recorded) sum(t *testing.T, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					total += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					total += int64(p.Count)
				}
			}
		}
	}
	return total
}

func attr(s tracetest.SpanStub, k string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, k string, want any) {
	t.Helper()
	v, ok := attr(s, k)
	if !ok || v.AsInterface() != want {
		t.Errorf("span %s: %s = %v (present %v), want %v", s.Name, k, v.AsInterface(), ok, want)
	}
}

func TestSpansOfDo(t *testing.T) {
	r := newRecorded(t)
	ctx, root := r.tp.Tracer("test").Start(context.Background(), "root")
	extended := make(chan struct{}, 1)
	m := newMem(r.obs.Observe, func(_ context.Context, e dlock.Event) {
		if e.Kind == dlock.EventExtended {
			select {
			case extended <- struct{}{}:
			default:
			}
		}
	})
	var fence uint64
	var held time.Duration
	err := dlock.Do(ctx, m, "k", 300*time.Millisecond, func(ctx context.Context) error {
		start := time.Now()
		defer func() { held = time.Since(start) }()
		fence = dlock.LockFromContext(ctx).Fence()
		select { // past one extension at least
		case <-extended:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	acq, hold, rel := r.one(t, "dlock.acquire"), r.one(t, "dlock.hold"), r.one(t, "dlock.release")
	rootID := root.SpanContext().SpanID()
	if acq.Parent.SpanID() != rootID || hold.Parent.SpanID() != rootID {
		t.Errorf("dlock.acquire and dlock.hold are not children of the caller's span")
	}
	if rel.Parent.SpanID() != hold.SpanContext.SpanID() {
		t.Errorf("dlock.release is not a child of dlock.hold")
	}
	exts := r.byName("dlock.extend")
	if len(exts) == 0 {
		t.Fatalf("no dlock.extend span: %v", names(r.spans.GetSpans()))
	}
	for _, s := range exts {
		if s.Parent.SpanID() != hold.SpanContext.SpanID() {
			t.Errorf("dlock.extend is not a child of dlock.hold")
		}
		wantAttr(t, s, "dlock.outcome", "extended")
	}
	for _, s := range []tracetest.SpanStub{acq, hold, rel} {
		wantAttr(t, s, "dlock.key", "k")
		wantAttr(t, s, "dlock.fence", int64(fence))
		if s.Status.Code == codes.Error {
			t.Errorf("span %s: status %v", s.Name, s.Status)
		}
		if s.EndTime.Before(s.StartTime) {
			t.Errorf("span %s ends before it starts", s.Name)
		}
	}
	wantAttr(t, acq, "dlock.outcome", "granted")
	wantAttr(t, acq, "dlock.attempts", int64(1))
	wantAttr(t, hold, "dlock.outcome", "released")
	wantAttr(t, rel, "dlock.outcome", "released")
	if d := hold.EndTime.Sub(hold.StartTime); d < held {
		t.Errorf("dlock.hold lasted %v, want at least the %v fn held the lock", d, held)
	}
	if acq.EndTime.After(hold.StartTime) || rel.EndTime.After(hold.EndTime) {
		t.Errorf("dlock.acquire must end before dlock.hold starts, dlock.release within it")
	}
}

func TestSpanOfRefusal(t *testing.T) {
	r := newRecorded(t)
	m := newMem(r.obs.Observe)
	held, err := m.Hold("k", time.Minute) // another owner's: not observed
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	_, err = dlock.Acquire(context.Background(), m, "k", time.Minute, dlock.WithRetryCount(0))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire: %v, want ErrNotAcquired", err)
	}
	acq := r.one(t, "dlock.acquire")
	wantAttr(t, acq, "dlock.outcome", "busy")
	if acq.Status.Code != codes.Error {
		t.Errorf("refused dlock.acquire: status %v, want Error", acq.Status)
	}
	if _, ok := attr(acq, "dlock.fence"); ok {
		t.Errorf("refused dlock.acquire has a fence")
	}
	if n := r.sum(t, "dlock.waiting"); n != 0 {
		t.Errorf("dlock.waiting %d after the refusal, want 0", n)
	}
}

// TestLostThenReleased: a lost lock ends its hold once (an Error span, one
// loss, dlock.held back to 0), and its later release does not end it again.
func TestLostThenReleased(t *testing.T) {
	r := newRecorded(t)
	m := newMem(r.obs.Observe)
	err := dlock.Do(context.Background(), m, "k", time.Minute, func(ctx context.Context) error {
		m.Lose("k") // the server lost it; the release after finds it gone
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
	hold := r.one(t, "dlock.hold")
	wantAttr(t, hold, "dlock.outcome", "lost")
	wantAttr(t, hold, "dlock.detected", "session_gone")
	if hold.Status.Code != codes.Error {
		t.Errorf("lost dlock.hold: status %v, want Error", hold.Status)
	}
	rel := r.one(t, "dlock.release")
	wantAttr(t, rel, "dlock.outcome", "not_held")
	if rel.Parent.SpanID() == hold.SpanContext.SpanID() {
		t.Errorf("the release after the loss is a child of the ended dlock.hold")
	}
	for name, want := range map[string]int64{"dlock.held": 0, "dlock.losses": 1, "dlock.hold.duration": 1, "dlock.grants": 1} {
		if got := r.sum(t, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if n := dlockotel.Tracked(r.obs); n != 0 {
		t.Errorf("%d locks tracked after the release, want 0", n)
	}
}

func TestKeyOptions(t *testing.T) {
	for _, c := range []struct {
		name      string
		opt       dlockotel.Option
		key, hash bool
	}{
		{"default", nil, true, false},
		{"hash", dlockotel.WithKeyHash(), false, true},
		{"none", dlockotel.WithoutKey(), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var opts []dlockotel.Option
			if c.opt != nil {
				opts = append(opts, c.opt)
			}
			r := newRecorded(t, opts...)
			if err := dlock.Do(context.Background(), newMem(r.obs.Observe), "customer:42", time.Minute,
				func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if keys := r.grantKeys(t); len(keys) != 0 {
				t.Errorf("metrics carry keys %v without WithKeyOnMetrics", keys)
			}
			for _, s := range r.spans.GetSpans() {
				if _, ok := attr(s, "dlock.key"); ok != c.key {
					t.Errorf("span %s: dlock.key present %v, want %v", s.Name, ok, c.key)
				}
				v, ok := attr(s, "dlock.key_hash")
				if ok != c.hash || (ok && v.AsString() != dlockotel.HashKey("customer:42")) {
					t.Errorf("span %s: dlock.key_hash %q (present %v), want present %v", s.Name, v.AsString(), ok, c.hash)
				}
			}
		})
	}
	if h := dlockotel.HashKey("customer:42"); len(h) != 16 || h == dlockotel.HashKey("customer:43") {
		t.Errorf("HashKey: %q", h)
	}
}

// TestTrackedBound: handles that are never released do not grow the
// Observer's state past its bound; the oldest is dropped and no longer
// counted as held.
func TestTrackedBound(t *testing.T) {
	r := newRecorded(t)
	dlockotel.SetMaxTracked(r.obs, 2)
	m := newMem(r.obs.Observe)
	var locks []*dlock.Lock
	for _, k := range []string{"a", "b", "c"} {
		l, err := dlock.Acquire(context.Background(), m, k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	if n := dlockotel.Tracked(r.obs); n != 2 {
		t.Errorf("%d locks tracked, want the bound, 2", n)
	}
	if n := r.sum(t, "dlock.held"); n != 2 {
		t.Errorf("dlock.held %d, want 2 (the dropped one not counted)", n)
	}
	dropped := r.one(t, "dlock.hold")
	wantAttr(t, dropped, "dlock.key", "a")
	wantAttr(t, dropped, "dlock.outcome", "untracked")
	for _, l := range locks {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.sum(t, "dlock.held"); n != 0 {
		t.Errorf("dlock.held %d after every release, want 0", n)
	}
	if n := r.sum(t, "dlock.hold.duration"); n != 2 {
		t.Errorf("%d holds recorded, want 2 (the dropped one has none)", n)
	}
}

// grantKeys returns the dlock.key and dlock.key_hash values of
// dlock.grants' data points.
func (r *recorded) grantKeys(t *testing.T) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "dlock.grants" {
				for _, p := range d.DataPoints {
					for _, k := range []attribute.Key{"dlock.key", "dlock.key_hash"} {
						if v, ok := p.Attributes.Value(k); ok {
							keys = append(keys, v.AsString())
						}
					}
				}
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func TestKeyOnMetrics(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []dlockotel.Option
		want []string
	}{
		{"plain", []dlockotel.Option{dlockotel.WithKeyOnMetrics()}, []string{"a", "b"}},
		{"hash", []dlockotel.Option{dlockotel.WithKeyOnMetrics(), dlockotel.WithKeyHash()},
			slices.Sorted(slices.Values([]string{dlockotel.HashKey("a"), dlockotel.HashKey("b")}))},
		{"none", []dlockotel.Option{dlockotel.WithKeyOnMetrics(), dlockotel.WithoutKey()}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRecorded(t, c.opts...)
			m := newMem(r.obs.Observe)
			for _, k := range []string{"a", "b", "a"} {
				if err := dlock.Do(context.Background(), m, k, time.Minute,
					func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if got := r.grantKeys(t); !slices.Equal(got, c.want) {
				t.Errorf("dlock.grants' keys %v, want %v", got, c.want)
			}
		})
	}
}
