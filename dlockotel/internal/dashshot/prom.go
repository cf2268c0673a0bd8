package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/servers"
)

// prometheus is a Prometheus server scraping one target every second.
type prometheus struct {
	url string
	cmd *exec.Cmd
}

func startPrometheus(ctx context.Context, bin, dir, target string) (*prometheus, error) {
	port, err := servers.FreePort()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n- job_name: dashshot\n  static_configs:\n  - targets: [%q]\n", target)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &prometheus{url: "http://" + addr, cmd: cmd}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return nil, fmt.Errorf("prometheus on %s not ready (see %s)", addr, log.Name())
		}
	}
}

func (p *prometheus) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
}

// series is one line of a panel: its labels and its points.
type series struct {
	labels map[string]string
	points []point
}

type point struct {
	t time.Time
	v float64
}

// query evaluates expr over [start, end] every step (instant at end when
// step is 0), through Prometheus's HTTP API.
func (p *prometheus) query(expr string, start, end time.Time, step time.Duration) ([]series, error) {
	v := url.Values{"query": {expr}}
	path := "/api/v1/query"
	if step > 0 {
		path = "/api/v1/query_range"
		v.Set("start", strconv.FormatInt(start.Unix(), 10))
		v.Set("end", strconv.FormatInt(end.Unix(), 10))
		v.Set("step", strconv.Itoa(int(step.Seconds())))
	} else {
		v.Set("time", strconv.FormatInt(end.Unix(), 10))
	}
	resp, err := http.PostForm(p.url+path, v)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status, Error string
		Data          struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
				Values [][2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, r.Error)
	}
	var out []series
	for _, res := range r.Data.Result {
		s := series{labels: res.Metric}
		if step == 0 {
			res.Values = [][2]any{res.Value}
		}
		for _, tv := range res.Values {
			sec, _ := tv[0].(float64)
			str, _ := tv[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				s.points = append(s.points, point{time.Unix(int64(sec), 0), f})
			}
		}
		out = append(out, s)
	}
	return out, nil
}
