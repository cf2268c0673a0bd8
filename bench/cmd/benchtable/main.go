// Command benchtable reads `go test -bench` output of package bench on
// stdin and prints markdown tables of the figures, with every row's ratio
// to the raw baseline measured in the same run and a check of the targets
// of issue 6. When a benchmark ran several times (run.sh's passes, which
// alternate the implementations), each figure is the median of its runs,
// and each ratio the median of the passes' own ratios: an implementation
// is compared with the baseline measured moments before it, which cancels
// most of the machine's drift between passes.
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

// versus returns the median over passes of r's unit divided by base's in
// the same pass, and the interquartile range of those ratios; without a
// value per pass on both sides, the ratio of the medians.
func (r *row) versus(base *row, unit string) (mid, lo, hi float64) {
	v, b := r.metrics[unit], base.metrics[unit]
	if len(v) == 0 || len(v) != len(b) {
		x, _ := r.get(unit)
		y, _ := base.get(unit)
		if y == 0 {
			return 0, 0, 0
		}
		return x / y, x / y, x / y
	}
	q := make([]float64, 0, len(v))
	for i := range v {
		if b[i] != 0 {
			q = append(q, v[i]/b[i])
		}
	}
	if len(q) == 0 {
		return 0, 0, 0
	}
	slices.Sort(q)
	return q[len(q)/2], q[len(q)/4], q[(3*len(q))/4]
}

// versusCell formats versus for a table: the ratio and, over several
// passes, the range of the middle half of them.
func versusCell(r, base *row, unit string) string {
	mid, lo, hi := r.versus(base, unit)
	if mid == 0 {
		return "—"
	}
	if len(r.metrics[unit]) < 4 || r == base {
		return fmt.Sprintf("%.2fx", mid)
	}
	return fmt.Sprintf("%.2fx (%.2f–%.2f)", mid, lo, hi)
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

var lineRE = regexp.MustCompile(`^Benchmark(I?[A-Z][0-9]?)/(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

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
	interleaved := map[string]*group{}
	for _, g := range groups {
		if name, ok := strings.CutPrefix(g.name, "I"); ok {
			interleaved[name] = g
		}
	}
	var checks []string
	for _, g := range groups {
		switch g.name {
		case "A", "B", "E":
			checks = append(checks, cycleTable(g, interleaved[g.name])...)
		case "C1", "C2":
			checks = append(checks, contendedTable(g, interleaved[g.name])...)
		case "D":
			checks = append(checks, parallelTable(g, interleaved[g.name])...)
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

// cycleRatio returns impl's cycles/s over the baseline's: from the
// interleaved runs when there are some (the more trustworthy figure, see
// bench/interleaved_test.go), else from the separate runs. how says which.
func cycleRatio(g, ig *group, impl string) (ratio float64, how string) {
	if ig != nil {
		if r := ig.find(impl); r != nil {
			v, _ := r.get("x-raw")
			return v, "interleaved"
		}
	}
	if r, base := g.find(impl), baseline(g); r != nil && base != nil {
		v, _, _ := r.versus(base, "cycles/s")
		return v, "separate runs"
	}
	return 0, ""
}

// interleavedTable prints the x-raw and p50-x-raw ratios of an
// interleaved group.
func interleavedTable(ig *group) {
	fmt.Printf("Interleaved with the baseline in blocks of 25 cycles, both over the same clients or pool (Benchmark%s; the ratios of cycle rates and of median cycle times, median of the passes, middle half in brackets; the baseline's own row is it against itself, the method's own error):\n\n", ig.name)
	fmt.Println("| implementation | cycles/s vs baseline, interleaved | p50 vs baseline, interleaved |")
	fmt.Println("|---|---:|---:|")
	for _, r := range ig.rows {
		if len(r.metrics["x-raw"]) == 0 {
			continue
		}
		fmt.Printf("| %s | %s | %s |\n", r.impl, medianCell(r.metrics["x-raw"]), medianCell(r.metrics["p50-x-raw"]))
	}
	fmt.Println()
}

// medianCell formats the median of v and, over four values or more, the
// range of their middle half.
func medianCell(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	v = slices.Clone(v)
	slices.Sort(v)
	cell := fmt.Sprintf("%.2fx", v[len(v)/2])
	if len(v) >= 4 {
		cell += fmt.Sprintf(" (%.2f–%.2f)", v[len(v)/4], v[(3*len(v))/4])
	}
	return cell
}

func cycleTable(g, ig *group) []string {
	base := baseline(g)
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | cycles/s | vs " + base.impl + " (middle half of passes) | p50 µs | p50 vs " + base.impl + " | p99 µs | allocs/cycle | B/cycle |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range g.rows {
		c, _ := r.get("cycles/s")
		p50, _ := r.get("p50-us")
		p99, _ := r.get("p99-us")
		allocs, _ := r.get("allocs/op")
		bytes, _ := r.get("B/op")
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.impl, num(c), versusCell(r, base, "cycles/s"), num(p50), versusCell(r, base, "p50-us"), num(p99), num(allocs), num(bytes))
	}
	fmt.Println()
	if ig != nil {
		interleavedTable(ig)
	}
	var out []string
	switch g.name {
	case "A":
		for _, impl := range []string{"dlock", "dlock-wait"} {
			if r := g.find(impl); r != nil {
				c, how := cycleRatio(g, ig, impl)
				a, _ := r.get("allocs/op")
				out = append(out,
					check(c >= 0.95, "A %s cycles/s %.3fx raw, %s (>= 0.95x)", impl, c, how),
					check(a <= 30, "A %s %.0f allocs/cycle (<= 30)", impl, a))
			}
		}
		// For scale: what a fence costs any lock (raw-fenced is the least
		// a fenced lock can send; raw-pipe is its pipeline without the
		// INCR), and how close dlock comes to that.
		if f, how := cycleRatio(g, ig, "raw-fenced"); f > 0 {
			if c, _ := cycleRatio(g, ig, "dlock"); c > 0 {
				p, _ := cycleRatio(g, ig, "raw-pipe")
				out = append(out, fmt.Sprintf("A for scale: raw-pipe %.2fx and raw-fenced %.2fx raw, %s; dlock %.2fx raw-fenced", p, f, how, c/f))
			}
		}
	case "B":
		if r := g.find("dlock"); r != nil {
			vsRaw, _, _ := r.versus(base, "p50-us")
			vsRedsync := vsRaw
			if rs := g.find("redsync"); rs != nil {
				vsRedsync, _, _ = r.versus(rs, "p50-us")
			}
			how := "separate runs"
			if ig != nil {
				// Interleaved: each against the raw fan-out in the same
				// blocks; redsync's ratio divides dlock's.
				if d, s := ig.find("dlock"), ig.find("redsync"); d != nil {
					vsRaw, _ = d.get("p50-x-raw")
					vsRedsync, how = vsRaw, "interleaved"
					if s != nil {
						if rs, ok := s.get("p50-x-raw"); ok && rs > 0 {
							vsRedsync = vsRaw / rs
						}
					}
				}
			}
			out = append(out, check(vsRaw <= 1 && vsRedsync <= 1, "B dlock p50 %.2fx the raw fan-out's and %.2fx redsync's, %s (<= both)", vsRaw, vsRedsync, how))
		}
	case "E":
		if r := g.find("dlock"); r != nil {
			c, how := cycleRatio(g, ig, "dlock")
			out = append(out, check(c >= 0.9, "E dlock cycles/s %.3fx raw, %s (within 10%%)", c, how))
		}
	}
	return out
}

func parallelTable(g, ig *group) []string {
	base := baseline(g)
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | cycles/s | vs raw (middle half of passes) | allocs/cycle |")
	fmt.Println("|---|---:|---:|---:|")
	for _, r := range g.rows {
		c, _ := r.get("cycles/s")
		a, _ := r.get("allocs/op")
		fmt.Printf("| %s | %s | %s | %s |\n", r.impl, num(c), versusCell(r, base, "cycles/s"), num(a))
	}
	fmt.Println()
	if ig != nil {
		fmt.Printf("Interleaved with the baseline in alternating windows of 100ms, the 64 goroutines on the same client (Benchmark%s; the ratio of cycle rates, median of the passes, middle half in brackets; the baseline's own row is it against itself, the method's own error):\n\n", ig.name)
		fmt.Println("| implementation | cycles/s vs baseline, interleaved |")
		fmt.Println("|---|---:|")
		for _, r := range ig.rows {
			if len(r.metrics["x-raw"]) > 0 {
				fmt.Printf("| %s | %s |\n", r.impl, medianCell(r.metrics["x-raw"]))
			}
		}
		fmt.Println()
	}
	r := g.find("dlock")
	if r == nil {
		return nil
	}
	c, _, _ := r.versus(base, "cycles/s")
	how := "separate passes"
	if ig != nil {
		if ir := ig.find("dlock"); ir != nil {
			c, _ = ir.get("x-raw")
			how = "interleaved"
		}
	}
	return []string{check(c >= 0.95, "D dlock cycles/s %.2fx raw, %s (>= 0.95x)", c, how)}
}

func contendedTable(g, ig *group) []string {
	base := baseline(g)
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | acq/s | vs raw | hand-off p50 µs | vs raw | hand-off p99 µs | handed to another | acq per goroutine min–max | wait p50 ms | wait max ms | RT per hand-off | RT per acq | overlaps | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	// Ratios are medians of the passes' own ratios (versus), as elsewhere.
	vs := func(r *row, unit string) float64 { mid, _, _ := r.versus(base, unit); return mid }
	for _, r := range g.rows {
		v := func(u string) float64 { x, _ := r.get(u); return x }
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %.0f%% | %.0f–%.0f | %s | %s | %s | %s | %.0f | %.0f |\n",
			r.impl, num(v("acq/s")), ratio(vs(r, "acq/s"), 1), num(v("handoff-p50-us")), ratio(vs(r, "handoff-p50-us"), 1),
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
			check(vs(r, "handoff-p50-us") <= 1.5, "C2 dlock hand-off p50 %.0fµs = %.2fx the 1ms-polling baseline's (<= 1.5x)", v("handoff-p50-us"), vs(r, "handoff-p50-us")),
			check(v("rt/handoff") <= 4, "C2 dlock %.2f round trips per hand-off (<= 4)", v("rt/handoff")),
			check(v("acq-min") > 0 && v("acq-max") <= 2*v("acq-min"), "C2 dlock acquisitions per goroutine %.0f–%.0f (within 2x)", v("acq-min"), v("acq-max")),
			check(v("wait-max-ms") <= 10*v("wait-p50-ms"), "C2 dlock longest wait %.1fms = %.1fx the median (<= 10x)", v("wait-max-ms"), v("wait-max-ms")/v("wait-p50-ms")))
	case "C1":
		// The peer dlock compares worst with: interleaved when measured so
		// (BenchmarkIC1), otherwise pass by pass.
		worst, worstName, how := 0.0, "", "interleaved"
		if ig != nil {
			peerTable(ig)
			for _, p := range ig.rows {
				if q, _ := p.get("x-peer"); worstName == "" || q < worst {
					worst, worstName = q, p.impl
				}
			}
		} else {
			how = "separate windows"
			for _, p := range g.rows {
				if p.impl == "dlock" || strings.HasPrefix(p.impl, "raw") {
					continue
				}
				if q, _, _ := r.versus(p, "acq/s"); worstName == "" || q < worst {
					worst, worstName = q, p.impl
				}
			}
		}
		out = append(out, check(worst >= 1, "C1 dlock acq/s %.2fx %s's, the closest peer, %s (>= every peer)", worst, worstName, how))
	}
	return out
}

// peerTable prints the x-peer ratios of BenchmarkIC1.
func peerTable(ig *group) {
	fmt.Printf("dlock against each peer in alternating windows of 400ms, 6 rounds (Benchmark%s; dlock's acquisitions per second over the peer's, median of the passes, all of them in brackets):\n\n", ig.name)
	fmt.Println("| peer | dlock acq/s vs the peer's, interleaved |")
	fmt.Println("|---|---:|")
	for _, r := range ig.rows {
		mid, ok := r.get("x-peer")
		if !ok {
			continue
		}
		cell := fmt.Sprintf("%.2fx", mid)
		if v := slices.Sorted(slices.Values(r.metrics["x-peer"])); len(v) > 1 {
			parts := make([]string, len(v))
			for i, x := range v {
				parts[i] = fmt.Sprintf("%.2f", x)
			}
			cell += " (" + strings.Join(parts, ", ") + ")"
		}
		fmt.Printf("| %s | %s |\n", r.impl, cell)
	}
	fmt.Println()
}
