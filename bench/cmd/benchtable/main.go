// Command benchtable reads `go test -bench` output of package bench on
// stdin and prints markdown tables of the figures, with every row's ratio
// to the raw baseline measured in the same run and a check of the targets
// of issue 6. When a benchmark ran several times (-count), each figure is
// the median of its runs.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// row is one implementation in one group, its figures by unit.
type row struct {
	impl    string
	metrics map[string][]float64
}

func (r *row) get(unit string) (float64, bool) {
	v := r.metrics[unit]
	if len(v) == 0 {
		return 0, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2], true
}

type group struct {
	name string
	rows []*row
}

func (g *group) find(impl string) *row {
	for _, r := range g.rows {
		if r.impl == impl {
			return r
		}
	}
	return nil
}

var lineRE = regexp.MustCompile(`^Benchmark([A-Z][0-9]?)/(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parse(in io.Reader) ([]*group, error) {
	var groups []*group
	byName := map[string]*group{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		g := byName[m[1]]
		if g == nil {
			g = &group{name: m[1]}
			byName[m[1]] = g
			groups = append(groups, g)
		}
		r := g.find(m[2])
		if r == nil {
			r = &row{impl: m[2], metrics: map[string][]float64{}}
			g.rows = append(g.rows, r)
		}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", sc.Text(), err)
			}
			r.metrics[f[i+1]] = append(r.metrics[f[i+1]], v)
		}
	}
	return groups, sc.Err()
}

func main() {
	groups, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	var checks []string
	for _, g := range groups {
		switch g.name {
		case "A", "B", "E":
			checks = append(checks, cycleTable(g)...)
		case "C1", "C2":
			checks = append(checks, contendedTable(g)...)
		case "D":
			checks = append(checks, parallelTable(g)...)
		}
	}
	if len(checks) > 0 {
		fmt.Println("### Targets")
		fmt.Println()
		for _, c := range checks {
			fmt.Println("- " + c)
		}
	}
}

var titles = map[string]string{
	"A":  "A. Uncontended acquire+release, one goroutine, one client",
	"B":  "B. Redlock over 5 independent redis-servers, one goroutine",
	"C1": "C1. 16 goroutines (own clients), one key, hold 0, re-acquire at once",
	"C2": "C2. 16 goroutines (own clients), one key, hold 1ms, then step aside until another holds it",
	"D":  "D. 64 goroutines on their own keys, one shared client",
	"E":  "E. PostgreSQL session advisory lock, one goroutine",
}

func baseline(g *group) *row {
	for _, name := range []string{"raw", "raw-fanout", "raw-poll-1ms"} {
		if r := g.find(name); r != nil {
			return r
		}
	}
	return nil
}

func ratio(v, base float64) string {
	if base == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", v/base)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func check(ok bool, format string, args ...any) string {
	mark := "met"
	if !ok {
		mark = "**missed**"
	}
	return fmt.Sprintf(format, args...) + ": " + mark
}

func cycleTable(g *group) []string {
	base := baseline(g)
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | cycles/s | vs " + base.impl + " | p50 µs | p99 µs | allocs/cycle | B/cycle |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	bc, _ := base.get("cycles/s")
	bp50, _ := base.get("p50-us")
	for _, r := range g.rows {
		c, _ := r.get("cycles/s")
		p50, _ := r.get("p50-us")
		p99, _ := r.get("p99-us")
		allocs, _ := r.get("allocs/op")
		bytes, _ := r.get("B/op")
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.impl, num(c), ratio(c, bc), num(p50), num(p99), num(allocs), num(bytes))
	}
	fmt.Println()
	var out []string
	switch g.name {
	case "A":
		for _, impl := range []string{"dlock", "dlock-wait"} {
			if r := g.find(impl); r != nil {
				c, _ := r.get("cycles/s")
				a, _ := r.get("allocs/op")
				out = append(out,
					check(c >= 0.95*bc, "A %s cycles/s %.2fx raw (>= 0.95x)", impl, c/bc),
					check(a <= 30, "A %s %.0f allocs/cycle (<= 30)", impl, a))
			}
		}
	case "B":
		if r := g.find("dlock"); r != nil {
			p50, _ := r.get("p50-us")
			rs := g.find("redsync")
			rsp50 := p50
			if rs != nil {
				rsp50, _ = rs.get("p50-us")
			}
			out = append(out, check(p50 <= bp50 && p50 <= rsp50, "B dlock p50 %.0fµs vs raw fan-out %.0fµs and redsync %.0fµs (<= both)", p50, bp50, rsp50))
		}
	case "E":
		if r := g.find("dlock"); r != nil {
			c, _ := r.get("cycles/s")
			out = append(out, check(c >= 0.9*bc, "E dlock cycles/s %.2fx raw (within 10%%)", c/bc))
		}
	}
	return out
}

func parallelTable(g *group) []string {
	base := baseline(g)
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | cycles/s | vs raw | allocs/cycle |")
	fmt.Println("|---|---:|---:|---:|")
	bc, _ := base.get("cycles/s")
	for _, r := range g.rows {
		c, _ := r.get("cycles/s")
		a, _ := r.get("allocs/op")
		fmt.Printf("| %s | %s | %s | %s |\n", r.impl, num(c), ratio(c, bc), num(a))
	}
	fmt.Println()
	if r := g.find("dlock"); r != nil {
		c, _ := r.get("cycles/s")
		return []string{check(c >= 0.95*bc, "D dlock cycles/s %.2fx raw (>= 0.95x)", c/bc)}
	}
	return nil
}

func contendedTable(g *group) []string {
	base := baseline(g)
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | acq/s | vs raw | hand-off p50 µs | vs raw | hand-off p99 µs | handed to another | acq per goroutine min–max | wait p50 ms | wait max ms | RT per hand-off | RT per acq | overlaps | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ba, _ := base.get("acq/s")
	bh, _ := base.get("handoff-p50-us")
	for _, r := range g.rows {
		v := func(u string) float64 { x, _ := r.get(u); return x }
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %.0f%% | %.0f–%.0f | %s | %s | %s | %s | %.0f | %.0f |\n",
			r.impl, num(v("acq/s")), ratio(v("acq/s"), ba), num(v("handoff-p50-us")), ratio(v("handoff-p50-us"), bh),
			num(v("handoff-p99-us")), 100*v("handoff-share"), v("acq-min"), v("acq-max"),
			num(v("wait-p50-ms")), num(v("wait-max-ms")), num(v("rt/handoff")), num(v("rt/acq")), v("overlaps"), v("errors"))
	}
	fmt.Println()
	r := g.find("dlock")
	if r == nil {
		return nil
	}
	v := func(u string) float64 { x, _ := r.get(u); return x }
	var out []string
	switch g.name {
	case "C2":
		out = append(out,
			check(v("handoff-p50-us") <= 1.5*bh, "C2 dlock hand-off p50 %.0fµs = %.2fx the 1ms-polling baseline's (<= 1.5x)", v("handoff-p50-us"), v("handoff-p50-us")/bh),
			check(v("rt/handoff") <= 4, "C2 dlock %.2f round trips per hand-off (<= 4)", v("rt/handoff")),
			check(v("acq-min") > 0 && v("acq-max") <= 2*v("acq-min"), "C2 dlock acquisitions per goroutine %.0f–%.0f (within 2x)", v("acq-min"), v("acq-max")),
			check(v("wait-max-ms") <= 10*v("wait-p50-ms"), "C2 dlock longest wait %.1fms = %.1fx the median (<= 10x)", v("wait-max-ms"), v("wait-max-ms")/v("wait-p50-ms")))
	case "C1":
		best, bestName := 0.0, ""
		for _, p := range g.rows {
			if p.impl == "dlock" || strings.HasPrefix(p.impl, "raw") {
				continue
			}
			if a, _ := p.get("acq/s"); a > best {
				best, bestName = a, p.impl
			}
		}
		out = append(out, check(v("acq/s") >= best, "C1 dlock %.0f acq/s vs the fastest peer %s %.0f (>= every peer)", v("acq/s"), bestName, best))
	}
	return out
}
