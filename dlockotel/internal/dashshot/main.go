// Command dashshot draws docs/dashboard.png: dlockotel's Grafana
// dashboard (dashboard.json) filled with real data, for the docs, where
// Grafana itself cannot be installed. It is a faithful render, not a
// Grafana screenshot: it runs lock traffic on throwaway redis-server and
// PostgreSQL servers (redislock, redlock over three nodes, pglock) through
// a dlockotel Observer and the Prometheus exporter, has a real Prometheus
// scrape it, evaluates every query of the dashboard through Prometheus's
// HTTP API (Grafana's variables replaced: $__rate_interval by 15s, $__range
// by the run's length, $backend by .*), draws each panel where its gridPos
// puts it (a dark theme like Grafana's), and screenshots the page with a
// headless Chromium.
//
//	go run ./dlockotel/internal/dashshot -prometheus /path/to/prometheus -out docs/dashboard.png
//
// Debian: apt-get download prometheus (and unpack the binary with
// dpkg-deb -x), apt-get install chromium-headless-shell.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dlock-go/dlock/dlockotel"
)

func main() {
	var (
		promBin  = flag.String("prometheus", "prometheus", "the Prometheus server `binary`")
		chromium = flag.String("chromium", "chromium-headless-shell", "the headless Chromium `binary`")
		dash     = flag.String("dashboard", "dlockotel/dashboard.json", "the dashboard `file`")
		out      = flag.String("out", "docs/dashboard.png", "the picture to write (`PNG`); the page goes beside it as .html with -keep-html")
		keepHTML = flag.Bool("keep-html", false, "keep the HTML page")
		length   = flag.Duration("duration", 4*time.Minute, "how long the traffic runs")
	)
	flag.Parse()
	if err := run(*promBin, *chromium, *dash, *out, *keepHTML, *length); err != nil {
		fmt.Fprintln(os.Stderr, "dashshot:", err)
		os.Exit(1)
	}
}

func run(promBin, chromium, dashFile, out string, keepHTML bool, length time.Duration) error {
	var d dashboard
	b, err := os.ReadFile(dashFile)
	if err == nil {
		err = json.Unmarshal(b, &d)
	}
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "dashshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	target, obs, stopMetrics, err := serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	prom, err := startPrometheus(ctx, promBin, dir, target)
	if err != nil {
		return err
	}
	defer prom.stop()
	bs, stop, err := startBackends(ctx, dir, obs.Observe)
	if err != nil {
		return err
	}
	defer stop()
	start := time.Now()
	end := start.Add(length - 2*time.Second) // still in the traffic: the stats show it running
	tctx, cancel := context.WithTimeout(ctx, length)
	traffic(tctx, bs)
	cancel()
	if err := fill(prom, d.Panels, start, end); err != nil {
		return err
	}
	note := fmt.Sprintf("Rendered from dlockotel/dashboard.json by dlockotel/internal/dashshot, not by Grafana: %v of lock traffic "+
		"on redis-server, 3 Redis nodes (Redlock) and PostgreSQL, scraped by Prometheus every second, each query evaluated by it.", length)
	page := filepath.Join(dir, "dashboard.html")
	if keepHTML {
		page = strings.TrimSuffix(out, filepath.Ext(out)) + ".html"
	}
	if err := os.WriteFile(page, []byte(render(d, note, start, end)), 0o644); err != nil {
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	shot := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		fmt.Sprintf("--window-size=%d,%d", pageWidth, pageHeight(d)), "--screenshot="+abs, "file://"+mustAbs(page))
	if o, err := shot.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", chromium, err, o)
	}
	return nil
}

// serveMetrics serves an Observer's metrics on /metrics, on a free
// loopback port, as a program with dlockotel would.
func serveMetrics() (target string, obs *dlockotel.Observer, stop func(), err error) {
	reg := promclient.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return "", nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	obs, err = dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	go srv.Serve(ln)
	return ln.Addr().String(), obs, func() { srv.Close(); mp.Shutdown(context.Background()) }, nil
}

// fill evaluates every panel's queries over [start, end].
func fill(prom *prometheus, panels []panel, start, end time.Time) error {
	for i := range panels {
		p := &panels[i]
		step := 5 * time.Second
		if p.Interval != "" {
			d, err := time.ParseDuration(p.Interval)
			if err != nil {
				return fmt.Errorf("panel %q: interval: %w", p.Title, err)
			}
			step = d
		}
		r := strings.NewReplacer("$__rate_interval", "15s", "$__interval", fmt.Sprintf("%ds", int(step.Seconds())),
			"$__range", fmt.Sprintf("%ds", int(end.Sub(start).Seconds())), "$backend", ".*")
		if p.Type == "stat" {
			step = 0
		}
		for _, t := range p.Targets {
			ss, err := prom.query(r.Replace(t.Expr), start, end, step)
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			p.data = append(p.data, ss)
		}
	}
	return nil
}

func pageHeight(d dashboard) int {
	h := 0
	for _, p := range d.Panels {
		h = max(h, (p.GridPos.Y+p.GridPos.H)*(rowHeight+gap))
	}
	return h + 110 // the header
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}
