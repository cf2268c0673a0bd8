package dlockotel_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/redislock"
)

// New wires lock metrics to Prometheus: the OpenTelemetry Prometheus
// exporter registers them with a registry that promhttp serves on
// /metrics. (The example finds Redis at $REDIS_ADDR; go-redis uses
// localhost:6379 when it is empty.)
func ExampleNew() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())
	obs, err := dlockotel.New(dlockotel.WithMeterProvider(provider), dlockotel.WithKeyHash())
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux) // a program would call http.ListenAndServe
	defer srv.Close()

	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client, redislock.WithObserver(obs.Observe))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	err = dlock.Do(context.Background(), locker, "report:daily", 10*time.Second, func(ctx context.Context) error {
		// ... the work ...
		return nil
	})
	if err != nil {
		panic(err)
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if l := lines.Text(); strings.HasPrefix(l, "dlock_grants_total") || strings.HasPrefix(l, "dlock_held") ||
			strings.HasPrefix(l, "dlock_hold_duration_seconds_count") {
			fmt.Println(l)
		}
	}
	// Output:
	// dlock_grants_total{dlock_backend="redis"} 1
	// dlock_held{dlock_backend="redis"} 0
	// dlock_hold_duration_seconds_count{dlock_backend="redis",dlock_outcome="released"} 1
}
