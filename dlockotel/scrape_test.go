package dlockotel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// scraper serves an Observer's metrics through the Prometheus exporter, as
// a program would, and reads them back over HTTP.
type scraper struct {
	t   *testing.T
	srv *httptest.Server
	obs *dlockotel.Observer
}

func newScraper(t *testing.T, opts ...dlockotel.Option) *scraper {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithMeterProvider(mp),
		dlockotel.WithTracerProvider(noop.NewTracerProvider())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return &scraper{t: t, srv: srv, obs: obs}
}

// scrape GETs /metrics and parses it.
func (s *scraper) scrape() map[string]*dto.MetricFamily {
	s.t.Helper()
	resp, err := http.Get(s.srv.URL + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return mfs
}

// sample is one series' value: a counter's or gauge's value, or a
// histogram's count and sum.
type sample struct {
	value, count, sum float64
}

// get sums the series of metric name whose labels include labels (pairs).
func get(mfs map[string]*dto.MetricFamily, name string, labels ...string) sample {
	var s sample
	mf := mfs[name]
	if mf == nil {
		return s
	}
next:
	for _, m := range mf.Metric {
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			s.value += m.Counter.GetValue()
		case m.Gauge != nil:
			s.value += m.Gauge.GetValue()
		case m.Histogram != nil:
			s.count += float64(m.Histogram.GetSampleCount())
			s.sum += m.Histogram.GetSampleSum()
		}
	}
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// slept is how long each of lockTraffic's Do calls holds its lock.
const slept = 30 * time.Millisecond

// lockTraffic makes known lock traffic on a redis-server of its own,
// through a Locker observed by observe: three Do calls that each hold the
// lock for slept; a holder and two waiters that give up after two
// attempts each (busy), whileHeld running while the holder holds it; and
// a lock lost under Do (its key deleted behind it, so that its extension
// is refused). That is 5 grants, 2 refusals, 1 loss and 1 failed
// extension.
func lockTraffic(t *testing.T, observe func(context.Context, dlock.Event), whileHeld func()) {
	t.Helper()
	ctx := testCtx(t)
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	l, err := redislock.New(srv.Client(t), redislock.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		if err := dlock.Do(ctx, l, "job", time.Second, func(context.Context) error {
			time.Sleep(slept)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	held, err := dlock.Acquire(ctx, l, "busy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	whileHeld()
	for range 2 {
		_, err := dlock.Acquire(ctx, l, "busy", time.Minute,
			dlock.WithRetryCount(1), dlock.WithRetryDelay(10*time.Millisecond), dlock.WithRetryJitter(0))
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("waiter: %v, want ErrNotAcquired", err)
		}
	}
	time.Sleep(slept)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	err = dlock.Do(ctx, l, "lost", 300*time.Millisecond, func(ctx context.Context) error {
		if err := raw.Del(ctx, "lost").Err(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do after the key was deleted: %v, want ErrLockLost", err)
	}
}

// TestScrape does known lock traffic on a real redis-server and checks
// what /metrics says of it: 5 grants, 2 refusals (busy), 1 loss (the key
// deleted behind the holder's back, so that its extension is refused).
func TestScrape(t *testing.T) {
	s := newScraper(t)
	lockTraffic(t, s.obs.Observe, func() {
		if v := get(s.scrape(), "dlock_held").value; v != 1 {
			t.Errorf("dlock_held %v while one lock is held, want 1", v)
		}
	})

	mfs := s.scrape()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dlock_grants_total", nil, 5},
		{"dlock_refusals_total", nil, 2},
		{"dlock_refusals_total", []string{"dlock_outcome", "busy"}, 2},
		{"dlock_attempts_total", []string{"dlock_outcome", "busy"}, 4},
		{"dlock_attempts_total", []string{"dlock_outcome", "granted"}, 5},
		{"dlock_losses_total", nil, 1},
		{"dlock_losses_total", []string{"dlock_detected", "extension_refused"}, 1},
		{"dlock_extension_failures_total", []string{"dlock_outcome", "not_held"}, 1},
		{"dlock_held", nil, 0},
		{"dlock_waiting", nil, 0},
	} {
		if got := get(mfs, c.name, c.labels...).value; got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		name    string
		outcome string
		count   float64
		minSum  time.Duration
	}{
		{"dlock_acquire_duration_seconds", "granted", 5, 0},
		{"dlock_acquire_duration_seconds", "busy", 2, 0}, // a release announcement may cut the retry delay
		{"dlock_hold_duration_seconds", "released", 4, 4 * slept},
		{"dlock_hold_duration_seconds", "lost", 1, 100 * time.Millisecond}, // found at the extension, half the TTL in
	} {
		got := get(mfs, c.name, "dlock_outcome", c.outcome)
		if got.count != c.count || got.sum <= c.minSum.Seconds() || got.sum > 20 {
			t.Errorf("%s{dlock_outcome=%q}: count %v, sum %vs; want count %v, sum at least %vs",
				c.name, c.outcome, got.count, got.sum, c.count, c.minSum.Seconds())
		}
	}
	if t.Failed() {
		for name, mf := range mfs {
			t.Logf("%s: %v", name, mf.Metric)
		}
	}
}
