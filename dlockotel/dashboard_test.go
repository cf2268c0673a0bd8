package dlockotel_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// dashboard is what the test reads of dashboard.json.
type dashboard struct {
	Title  string
	Panels []struct {
		ID      int
		Title   string
		GridPos struct{ X, Y, W, H int }
		Targets []struct {
			RefID      string `json:"refId"`
			Expr       string
			Datasource struct{ UID string }
		}
	}
	Templating struct {
		List []struct {
			Name       string
			Type       string
			Definition string
		}
	}
}

// TestDashboard: every query of dashboard.json names metrics, and labels,
// that this module exports, as the Prometheus exporter names them after
// real lock traffic on a redis-server (not from a list kept by hand), and
// every metric the module exports is on the dashboard.
func TestDashboard(t *testing.T) {
	series := exportedSeries(t)
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	used := map[string]bool{}
	check := func(where, query string, metrics, labels []string) {
		if len(metrics) == 0 {
			t.Errorf("%s: %q names no metric", where, query)
		}
		known := map[string]bool{}
		for _, m := range metrics {
			ls, ok := series[m]
			if !ok {
				t.Errorf("%s: %q names %s, which dlockotel does not export", where, query, m)
			}
			used[m] = true
			for _, l := range ls {
				known[l] = true
			}
		}
		for _, l := range labels {
			if !known[l] {
				t.Errorf("%s: %q uses label %s, which none of %v has", where, query, l, metrics)
			}
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		where := "panel " + p.Title
		if ids[p.ID] || p.Title == "" || len(p.Targets) == 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: id %d repeated, no title, no query, or gridPos %+v outside 24 columns", where, p.ID, p.GridPos)
		}
		ids[p.ID] = true
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if refs[q.RefID] || q.Datasource.UID != "${datasource}" {
				t.Errorf("%s: refId %q repeated, or data source %q instead of the variable", where, q.RefID, q.Datasource.UID)
			}
			refs[q.RefID] = true
			metrics, labels := promNames(q.Expr)
			check(where, q.Expr, metrics, labels)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(METRIC, LABEL)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, v.Definition, []string{m[1]}, []string{m[2]})
	}
	for name := range series {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "dlock_") && !used[name] && !used[family+"_bucket"] && !used[family+"_count"] {
			t.Errorf("dlockotel exports %s, which no panel shows", name)
		}
	}
}

// exportedSeries returns the series names the module's metrics have on
// /metrics (a histogram's _bucket, _sum and _count), each with its label
// names, after lock traffic that records every one of them.
func exportedSeries(t *testing.T) map[string][]string {
	s := newScraper(t)
	lockTraffic(t, s.obs.Observe, func() {})
	series := map[string][]string{}
	add := func(name string, labels []string) {
		for _, l := range labels {
			if !slices.Contains(series[name], l) {
				series[name] = append(series[name], l)
			}
		}
		if series[name] == nil {
			series[name] = []string{}
		}
	}
	for name, mf := range s.scrape() {
		for _, m := range mf.Metric {
			var labels []string
			for _, lp := range m.Label {
				labels = append(labels, lp.GetName())
			}
			if mf.GetType() != dto.MetricType_HISTOGRAM {
				add(name, labels)
				continue
			}
			add(name+"_bucket", append(labels, "le"))
			add(name+"_sum", labels)
			add(name+"_count", labels)
		}
	}
	return series
}

var (
	labelValues  = regexp.MustCompile(`^label_values\(([a-zA-Z_:][\w:]*),\s*([a-zA-Z_]\w*)\)$`)
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promSelector = regexp.MustCompile(`\{[^}]*\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][\w:]*`)
	promKeywords = []string{"bool", "offset", "and", "or", "unless", "inf", "nan"}
)

// promNames returns the metric names and the label names a PromQL query
// uses. It knows as much PromQL as the dashboard's queries need:
// selectors, grouping clauses, ranges, strings, functions and
// aggregations; an identifier followed by "(" is a function.
func promNames(q string) (metrics, labels []string) {
	q = promString.ReplaceAllString(q, `""`)
	q = promSelector.ReplaceAllStringFunc(q, func(sel string) string {
		for _, m := range promMatcher.FindAllStringSubmatch(sel, -1) {
			labels = append(labels, m[1])
		}
		return " "
	})
	q = promGrouping.ReplaceAllStringFunc(q, func(g string) string {
		inner := promGrouping.FindStringSubmatch(g)[1]
		for _, l := range strings.Split(inner, ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		return " "
	})
	q = promRange.ReplaceAllString(q, " ")
	for _, loc := range promIdent.FindAllStringIndex(q, -1) {
		id := q[loc[0]:loc[1]]
		rest := strings.TrimSpace(q[loc[1]:])
		prev := byte(' ')
		if loc[0] > 0 {
			prev = q[loc[0]-1]
		}
		if strings.HasPrefix(rest, "(") || slices.Contains(promKeywords, strings.ToLower(id)) ||
			prev == '.' || (prev >= '0' && prev <= '9') { // a function, a keyword, 1e3's exponent
			continue
		}
		metrics = append(metrics, id)
	}
	return metrics, labels
}

// TestPromNames: the query reader finds what it should, so that
// TestDashboard's checks mean something.
func TestPromNames(t *testing.T) {
	for _, c := range []struct {
		q               string
		metrics, labels []string
	}{
		{`histogram_quantile(0.99, sum by (le, dlock_backend) (rate(dlock_acquire_duration_seconds_bucket{dlock_outcome="granted", dlock_backend=~"$backend"}[$__rate_interval])))`,
			[]string{"dlock_acquire_duration_seconds_bucket"}, []string{"dlock_outcome", "dlock_backend", "le", "dlock_backend"}},
		{`sum(rate(a_total[5m])) / sum without (x) (b) > 1e3 and on(y) c{z!~"}"}`,
			[]string{"a_total", "b", "c"}, []string{"z", "x", "y"}},
		{`sum(dlock_waiting)`, []string{"dlock_waiting"}, nil},
		{`vector(1)`, nil, nil},
	} {
		m, l := promNames(c.q)
		if !slices.Equal(m, c.metrics) || !slices.Equal(l, c.labels) {
			t.Errorf("%s:\n metrics %q, labels %q\nwant %q, %q", c.q, m, l, c.metrics, c.labels)
		}
	}
}
