// Command benchtable reads `go test -bench` output of package bench on
// stdin and prints markdown tables of the figures, with every row's ratio
// to the raw baseline measured in the same run, and under each table one
// line per target of issues 18 (item 6), 19 (item 3), 25 (items 1 and 5)
// and 27 (items 1-5: what a lock costs the server, D, allocations, C1's
// throughput, B) saying whether the run met it. When a benchmark ran several times (run.sh's
// passes, which alternate the implementations), each figure is the median
// of its runs, and each ratio the median of the passes' own ratios: an
// implementation is compared with the baseline measured moments before it,
// which cancels most of the machine's drift between passes.
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
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
	if base == nil { // not in this run (BENCH_ONLY)
		return 0, 0, 0
	}
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

var lineRE = regexp.MustCompile(`^Benchmark([A-Za-z0-9]+)/(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

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
	byName := map[string]*group{}
	for _, g := range groups {
		byName[g.name] = g
	}
	for _, name := range []string{"A", "Hook", "B", "C1", "C2", "D", "E", "Residue"} {
		g := byName[name]
		if g == nil {
			continue
		}
		var targets []string
		switch g.name {
		case "A", "B", "E":
			targets = cycleTable(g, byName["I"+g.name])
		case "C1", "C2":
			targets = contendedTable(g, byName["I"+g.name], byName["Ping"])
		case "D":
			targets = parallelTable(g, byName["I"+g.name])
		case "Residue":
			targets = residueTable(g)
		case "Hook":
			targets = hookTable(g)
		}
		for _, t := range targets {
			fmt.Println("- " + t)
		}
		if len(targets) > 0 {
			fmt.Println()
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

	"Hook": "Hook. dlock's uncontended cycle with an observer or the holder record, against no observer at all",

	"Residue": "Residue. Distinct names locked and released once each: what the servers hold",
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
	if base == 0 || v == 0 {
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

// check formats one target line: the figure, the target, met or missed.
func check(ok bool, format string, args ...any) string {
	mark := "met"
	if !ok {
		mark = "**missed**"
	}
	return "Target: " + fmt.Sprintf(format, args...) + ": " + mark
}

// forScale formats a line of figures that no target asks for.
func forScale(format string, args ...any) string {
	return "For scale: " + fmt.Sprintf(format, args...)
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
	baseName := "baseline"
	if base != nil {
		baseName = base.impl
	}
	fmt.Printf("### %s\n\n", titles[g.name])
	// server µs per cycle: only A measures it (INFO commandstats).
	withServer := base != nil && len(base.metrics["server-us/cycle"]) > 0
	head, rule := "", ""
	if withServer {
		head, rule = " server µs/cycle |", "---:|"
	}
	fmt.Println("| implementation | cycles/s | vs " + baseName + " (middle half of passes) | p50 µs | p50 vs " + baseName + " | p99 µs | allocs/cycle | B/cycle |" + head)
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|" + rule)
	for _, r := range g.rows {
		c, _ := r.get("cycles/s")
		p50, _ := r.get("p50-us")
		p99, _ := r.get("p99-us")
		allocs, _ := r.get("allocs/op")
		bytes, _ := r.get("B/op")
		cell := ""
		if withServer {
			if v, ok := r.get("server-us/cycle"); ok {
				cell = " " + num(v) + " |"
			} else {
				cell = " — |"
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s |%s\n", r.impl, num(c), versusCell(r, base, "cycles/s"), num(p50), versusCell(r, base, "p50-us"), num(p99), num(allocs), num(bytes), cell)
	}
	fmt.Println()
	if withServer {
		fmt.Println("\"server µs/cycle\" is the server's own time per cycle in the commands the client sent, a script's with the commands it runs (INFO commandstats); the rest of a cycle is the round trips and the client.")
		fmt.Println()
	}
	if ig != nil {
		interleavedTable(ig)
	}
	var out []string
	switch g.name {
	case "A": // issue 27 items 1 and 3 (issue 18's and 19's >= 0.95x are withdrawn)
		if d, bsm := g.find("dlock"), g.find("bsm"); d != nil && bsm != nil {
			a, _ := d.get("allocs/op")
			ba, _ := bsm.get("allocs/op")
			out = append(out, check(a <= ba, "A dlock %s allocs/cycle, bsm's %s (<= bsm's)", num(a), num(ba)))
		}
		if d := g.find("dlock"); d != nil && base != nil {
			ds, ok1 := d.get("server-us/cycle")
			rs, ok2 := base.get("server-us/cycle")
			if ok1 && ok2 && rs > 0 {
				out = append(out, check(ds <= 1.5*rs, "A dlock's server time per cycle %sµs = %.2fx raw's %sµs (INFO commandstats) (<= 1.5x)", num(ds), ds/rs, num(rs)))
			}
		}
		for _, impl := range []string{"dlock", "dlock-wait"} {
			if g.find(impl) != nil {
				c, how := cycleRatio(g, ig, impl)
				out = append(out, forScale("A %s cycles/s %.3fx raw's, %s", impl, c, how))
			}
		}
		// What the script costs, and what the library's Go code costs
		// over its own scripts.
		if l, how := cycleRatio(g, ig, "raw-lua"); l > 0 {
			f, _ := cycleRatio(g, ig, "raw-fenced")
			c, _ := cycleRatio(g, ig, "dlock")
			out = append(out, forScale("raw-lua (dlock's scripts, called directly) %.2fx and raw-fenced %.2fx raw's cycles/s, %s; dlock %.2fx raw-lua's", l, f, how, c/l))
		}
		// The scripts' server time alone, added to raw's mean cycle when
		// interleaved with dlock: the ratio that dlock's cycle would reach
		// if its client cost nothing more than raw's.
		if d := g.find("dlock"); d != nil && base != nil && ig != nil {
			ds, ok1 := d.get("server-us/cycle")
			rs, ok2 := base.get("server-us/cycle")
			var t float64
			if id := ig.find("dlock"); id != nil {
				t, _ = id.get("base-us")
			}
			if ok1 && ok2 && t > 0 {
				out = append(out, forScale("A server time per cycle: raw %sµs, dlock %sµs; dlock's extra %.1fµs on raw's mean cycle of %sµs (interleaved with dlock) alone makes %.3fx raw's cycles/s", num(rs), num(ds), ds-rs, num(t), t/(t+ds-rs)))
			}
		}
	case "B": // issue 19 item 7, issue 27 item 5
		if r := g.find("dlock"); r != nil {
			vsRaw, _, _ := r.versus(base, "p50-us")
			how := "separate runs"
			vsRedsync := 0.0
			if rs := g.find("redsync"); rs != nil {
				vsRedsync, _, _ = r.versus(rs, "p50-us")
			}
			if ig != nil {
				// Interleaved: each against the raw fan-out in the same
				// blocks; redsync's ratio divides dlock's.
				if d := ig.find("dlock"); d != nil {
					vsRaw, _ = d.get("p50-x-raw")
					how = "interleaved"
					if s := ig.find("redsync"); s != nil {
						if rs, ok := s.get("p50-x-raw"); ok && rs > 0 {
							vsRedsync = vsRaw / rs
						}
					}
				}
			}
			out = append(out, check(vsRaw <= 1, "B dlock p50 %.2fx the raw 5-node fan-out's, %s (<= 1.0x)", vsRaw, how))
			if vsRedsync > 0 {
				out = append(out, forScale("B dlock p50 %.2fx redsync's, %s", vsRedsync, how))
			}
		}
	}
	return out
}

// parallelTable prints D, and returns the target of issue 27 item 2: dlock
// at least raw's cycle rate and ahead of bsm and redsync, interleaved when
// measured so.
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
	if g.find("dlock") == nil {
		return nil
	}
	d, how := cycleRatio(g, ig, "dlock")
	out := []string{check(d >= 1, "D dlock cycles/s %.2fx raw's, %s (>= 1.0x)", d, how)}
	for _, peer := range []string{"bsm", "redsync"} {
		if g.find(peer) != nil {
			p, _ := cycleRatio(g, ig, peer)
			out = append(out, check(d > p, "D dlock %.2fx raw's against %s's %.2fx, %s (ahead)", d, peer, p, how))
		}
	}
	return out
}

// againstPeer returns dlock's (r's) acquisitions per second over peer's in
// C1: from BenchmarkIC1 (ig) when it ran the peer, else window by window.
func againstPeer(r, peer *row, ig *group) (ratio float64, how string) {
	if ig != nil {
		if p := ig.find(peer.impl); p != nil {
			x, _ := p.get("x-peer")
			return x, "interleaved"
		}
	}
	x, _, _ := r.versus(peer, "acq/s")
	return x, "separate windows"
}

// perPass returns the median over passes of a[i]/b[i] and every pass's
// ratio; without a value per pass on both sides, the ratio of the medians.
func perPass(a, b []float64) (mid float64, all []float64) {
	if len(a) == 0 || len(b) == 0 {
		return 0, nil
	}
	if len(a) == len(b) {
		for i := range a {
			if b[i] != 0 {
				all = append(all, a[i]/b[i])
			}
		}
	} else if m := median(b); m != 0 {
		all = []float64{median(a) / m}
	}
	if len(all) == 0 {
		return 0, nil
	}
	return median(all), all
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// passes formats every pass's value, in order of size, for a target line.
func passes(v []float64) string {
	if len(v) < 2 {
		return ""
	}
	parts := make([]string, len(v))
	for i, x := range slices.Sorted(slices.Values(v)) {
		parts[i] = num(x)
	}
	return " (passes: " + strings.Join(parts, ", ") + ")"
}

func contendedTable(g, ig, ping *group) []string {
	base := baseline(g)
	var pingRow *row
	if ping != nil {
		pingRow = ping.find("raw")
	}
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| implementation | acq/s | vs raw | hand-off p50 µs | vs raw | in PINGs | hand-off p99 µs | handed to another | acq per goroutine min–max (mean) | min ÷ mean | wait p50 ms | wait max ms | max ÷ p50 | RT per hand-off | commands per hand-off, sent / server | RT per acq | overlaps | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	// Ratios are medians of the passes' own ratios (versus), as elsewhere.
	vs := func(r *row, unit string) float64 { mid, _, _ := r.versus(base, unit); return mid }
	inPings := func(r *row) float64 {
		if pingRow == nil {
			return 0
		}
		mid, _ := perPass(r.metrics["handoff-p50-us"], pingRow.metrics["p50-us"])
		return mid
	}
	for _, r := range g.rows {
		v := func(u string) float64 { x, _ := r.get(u); return x }
		sentCell := "—"
		if _, ok := r.get("sent/handoff"); ok {
			sentCell = num(v("sent/handoff"))
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %.0f%% | %.0f–%.0f (%.0f) | %.2f | %s | %s | %s | %s | %s / %s | %s | %.0f | %.0f |\n",
			r.impl, num(v("acq/s")), ratio(vs(r, "acq/s"), 1), num(v("handoff-p50-us")), ratio(vs(r, "handoff-p50-us"), 1), ratio(inPings(r), 1),
			num(v("handoff-p99-us")), 100*v("handoff-share"), v("acq-min"), v("acq-max"), v("acq-mean"), v("acq-min-x-mean"),
			num(v("wait-p50-ms")), num(v("wait-max-ms")), num(v("wait-max-x-p50")), num(v("rt/handoff")), sentCell, num(v("cmd/handoff")),
			num(v("rt/acq")), v("overlaps"), v("errors"))
	}
	fmt.Println()
	fmt.Println("\"in PINGs\" is the hand-off p50 over the p50 of a PING round trip (BenchmarkPing: one goroutine, one client) measured beside each pass. Commands per hand-off: \"sent\" counts what the go-redis clients sent (a script's EVALSHA is one; — for rueidislock, whose client is not go-redis), \"server\" the server's total_commands_processed, which also counts every command a script runs. Fairness: \"min ÷ mean\" is the fewest acquisitions of one goroutine over the mean, \"max ÷ p50\" the longest wait over the median; both are medians of the passes' own.")
	fmt.Println()
	var out []string
	if ig != nil && g.name == "C1" {
		peerTable(ig)
	}
	r := g.find("dlock")
	if r == nil {
		return nil
	}
	v := func(u string) float64 { x, _ := r.get(u); return x }
	switch g.name {
	case "C1": // issue 18 items 4 and 6, issue 27 item 4
		if bsm := g.find("bsm-1ms"); bsm != nil {
			x, how := againstPeer(r, bsm, ig)
			out = append(out, check(x >= 1, "C1 dlock acq/s %.2fx bsm-1ms's, %s (dlock %.2fx raw's, bsm-1ms %.2fx, separate windows) (>= 1.0x)", x, how, vs(r, "acq/s"), vs(bsm, "acq/s")))
		}
		share := r.metrics["acq-min-x-mean"]
		out = append(out, check(median(share) >= 0.25, "C1 dlock's fewest acquisitions of one goroutine %.2fx the mean%s (>= 0.25x)", median(share), passes(share)))
		wait := r.metrics["wait-max-x-p50"]
		out = append(out, check(median(wait) < 20, "C1 dlock's longest wait %sms = %.1fx the median %sms%s (< 20x)", num(v("wait-max-ms")), median(wait), num(v("wait-p50-ms")), passes(wait)))
		// Against every peer: interleaved when measured so (BenchmarkIC1),
		// otherwise pass by pass. No target: reported.
		worst, worstName, how := 0.0, "", "interleaved"
		if ig != nil {
			for _, p := range ig.rows {
				if strings.HasPrefix(p.impl, "dlock") {
					continue // dlock-turns: a ceiling, not a peer
				}
				if q, _ := p.get("x-peer"); worstName == "" || q < worst {
					worst, worstName = q, p.impl
				}
			}
		} else {
			how = "separate windows"
			for _, p := range g.rows {
				if strings.HasPrefix(p.impl, "dlock") || strings.HasPrefix(p.impl, "raw") {
					continue
				}
				if q, _, _ := r.versus(p, "acq/s"); worstName == "" || q < worst {
					worst, worstName = q, p.impl
				}
			}
		}
		if worstName != "" {
			out = append(out, forScale("C1 dlock acq/s %.2fx %s's, the closest peer, %s", worst, worstName, how))
		}
		if t := g.find("dlock-turns"); t != nil {
			// The ceiling of a hand-off that waits for the release: see
			// the row's comment in bench/contended_test.go.
			x, how := againstPeer(r, t, ig)
			out = append(out, forScale("C1 dlock-turns (turns passed through a Go channel, each a TryAcquire and a Release: the ceiling of any design whose next attempt is sent after the release returns) %.2fx raw's acq/s; dlock %.2fx dlock-turns', %s", vs(t, "acq/s"), x, how))
		}
	case "C2": // issue 18 item 6
		sentPer, serverPer := v("sent/handoff"), v("cmd/handoff")
		out = append(out, check(sentPer <= 3, "C2 dlock %.2f commands per hand-off sent by its clients (the server counted %.1f, with the commands its scripts ran; %.2f round trips) (<= 3)", sentPer, serverPer, v("rt/handoff")))
		if pingRow != nil {
			mid, all := perPass(r.metrics["handoff-p50-us"], pingRow.metrics["p50-us"])
			p, _ := pingRow.get("p50-us")
			out = append(out, check(mid > 0 && mid <= 2, "C2 dlock hand-off p50 %sµs = %.2fx a PING round trip's p50 %sµs (a loop on one client, beside each pass)%s (<= 2x)", num(v("handoff-p50-us")), mid, num(p), passes(all)))
			if idle := ping.find("idle-1ms"); idle != nil {
				mid, _ := perPass(r.metrics["handoff-p50-us"], idle.metrics["p50-us"])
				p, _ := idle.get("p50-us")
				out = append(out, forScale("C2 dlock hand-off p50 %.2fx the p50 of a PING sent after 1ms idle, %sµs (as a release follows a 1ms hold)", mid, num(p)))
			}
		} else {
			out = append(out, check(false, "C2 dlock hand-off p50 in PING round trips: no BenchmarkPing in this run (<= 2x)"))
		}
		if x := vs(r, "handoff-p50-us"); x > 0 {
			out = append(out, forScale("C2 dlock hand-off p50 %.2fx raw-poll-1ms's", x))
		}
		// Its parts: the key is free between holders, so a hand-off is
		// the release's round trip and then the woken waiter's winning
		// attempt; the wake-up goes out with the release's reply, so the
		// two overlap by as much as the reply's way back.
		if rel, ok := r.get("release-rt-p50-us"); ok {
			won, _ := r.get("won-rt-p50-us")
			line := fmt.Sprintf("C2 dlock hand-off p50 %sµs, made of two round trips (p50s as the clients timed them): the release's %sµs, whose script wakes the waiter, then the woken waiter's winning attempt's %sµs, together %sµs", num(v("handoff-p50-us")), num(rel), num(won), num(rel+won))
			if base != nil {
				if brel, ok := base.get("release-rt-p50-us"); ok {
					bwon, _ := base.get("won-rt-p50-us")
					bh, _ := base.get("handoff-p50-us")
					line += fmt.Sprintf("; %s's hand-off %sµs against %sµs and %sµs (a poller's SET NX is often on its way before the release ends)", base.impl, num(bh), num(brel), num(bwon))
				}
			}
			out = append(out, forScale("%s", line))
		}

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

// residueTable prints BenchmarkResidue: keys and memory before, right
// after and once the fence TTL has passed (issue 19 item 3).
func residueTable(g *group) []string {
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| backend | servers | names | cycles/s | fence TTL | keys before | right after | after the TTL | used_memory before | right after | after the TTL | per fence counter | keys gone after |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var out []string
	for _, r := range g.rows {
		v := func(u string) float64 { x, _ := r.get(u); return x }
		fmt.Printf("| %s | %.0f | %.0f | %s | %.0fs | %.0f | %.0f | %.0f | %s | %s | %s | %.0f B | %.1fs |\n",
			r.impl, v("servers"), v("names"), num(v("cycles/s")), v("fence-ttl-s"), v("keys-before"), v("keys-after"), v("keys-idle"),
			kB(v("mem-before-B")), kB(v("mem-after-B")), kB(v("mem-idle-B")), v("B/counter"), v("idle-after-s"))
		left := v("keys-idle") - v("keys-before")
		out = append(out, check(left <= 0, "Residue %s: %.0f keys left on %.0f server(s) %.1fs after the last of %.0f releases, fence TTL %.0fs (none once the TTL has passed)",
			r.impl, max(left, 0), v("servers"), v("idle-after-s"), v("names"), v("fence-ttl-s")))
		cost := fmt.Sprintf("Residue %s: a released name keeps one fence counter per server, %.0f B of used_memory each, until the TTL; after it used_memory is %+.0f kB from before",
			r.impl, v("B/counter"), (v("mem-idle-B")-v("mem-before-B"))/1024)
		if missing := v("names")*v("servers") - (v("keys-after") - v("keys-before")); missing > 0 {
			cost += fmt.Sprintf(" (%.0f counters were not there right after: expired already, as the run took longer than the TTL, or never drawn on a node that a Redlock attempt left out)", missing)
		}
		out = append(out, forScale("%s", cost))
	}
	fmt.Println()
	fmt.Println("One TryAcquire and Release per name, from 32 goroutines on one Locker with a short fence TTL (WithFenceTTL; the default is 1h) so that the run need not wait an hour; keys and used_memory are summed over the servers, measured with only the benchmark's own connection open. A released name leaves its fence counter, and nothing else, until the TTL.")
	fmt.Println()
	return out
}

func kB(b float64) string { return fmt.Sprintf("%.0f kB", b/1024) }

// hookTable prints BenchmarkHook: what an observer (none set, a no-op, the
// OpenTelemetry one) and WithHolderInfo add to dlock's uncontended cycle,
// interleaved with the cycle that has no observer at all (issue 25 items
// 1 and 5).
func hookTable(g *group) []string {
	fmt.Printf("### %s\n\n", titles[g.name])
	fmt.Println("| configuration | cycle time vs no observer, interleaved (middle half of passes) | p50 vs no observer | µs/cycle | no observer's µs/cycle | allocs/cycle | no observer's allocs/cycle |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range g.rows {
		v := func(u string) float64 { x, _ := r.get(u); return x }
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.impl, medianCell(r.metrics["x-none"]), medianCell(r.metrics["p50-x-none"]),
			num(v("us/cycle")), num(v("base-us")), num(v("allocs/cycle")), num(v("base-allocs/cycle")))
	}
	fmt.Println()
	fmt.Println("TryAcquire and Release on one redislock.Locker, interleaved in blocks of 25 cycles on one client with the same cycle on a Locker whose logger discards (no observer at all, no event built). none is that baseline against itself, the method's own error; default-logger is the default configuration (slog.Default(), Info: the logger's observer asks whether Debug is enabled); noop adds WithObserver(func(context.Context, dlock.Event) {}); otel adds dlockotel's Observer on the OpenTelemetry SDK's providers (every metric recorded by a manual reader, every span sampled, nothing exported); holder adds WithHolderInfo; redlock-holder is Redlock's cycle over B's five servers with WithHolderInfo, against the same cycle with no observer. Allocations are each side's runtime.MemStats.Mallocs around its blocks, per cycle; cycle time ratios above 1 are slower.")
	fmt.Println()
	var out []string
	none := g.find("none")
	self := 0.0
	if none != nil {
		self, _ = none.get("x-none")
	}
	if d := g.find("default-logger"); d != nil {
		x, _ := d.get("x-none")
		a, _ := d.get("allocs/cycle")
		ba, _ := d.get("base-allocs/cycle")
		out = append(out, check(math.Round(a) == math.Round(ba), "Hook no hook set (default logger): %s allocs/cycle, equal to the no-observer baseline's %s", num(a), num(ba)))
		out = append(out, check(x <= 1.05, "Hook no hook set (default logger): cycle time %.2fx the no-observer baseline's, interleaved (the baseline against itself: %.2fx) (<= 1.05x)", x, self))
	}
	if n := g.find("noop"); n != nil {
		a, _ := n.get("allocs/cycle")
		ba, _ := n.get("base-allocs/cycle")
		out = append(out, check(math.Round(a) == math.Round(ba), "Hook no-op observer: %s allocs/cycle, equal to the no-observer baseline's %s", num(a), num(ba)))
	}
	for _, name := range []string{"noop", "otel", "holder", "redlock-holder"} {
		if r := g.find(name); r != nil {
			x, _ := r.get("x-none")
			bus, _ := r.get("base-us")
			a, _ := r.get("allocs/cycle")
			ba, _ := r.get("base-allocs/cycle")
			out = append(out, forScale("Hook %s: cycle time %.2fx the no-observer baseline's (%+.1fµs on its %sµs), %+.0f allocs/cycle", name, x, (x-1)*bus, num(bus), a-ba))
		}
	}
	return out
}
