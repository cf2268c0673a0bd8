// Package timeline draws what happened to a lock as an SVG picture: one
// lane per client with a bar for every critical section, marks for the
// writes the protected resource accepted and rejected, and bands for
// injected faults. An overlap (two clients inside at once) is drawn in
// red across both lanes, so it is visible at a glance. `dlock torture`
// and `dlock demo` write it with --timeline.
package timeline

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kinds of bars, marks and bands; each has its colour in the legend.
const (
	Held        = "held"      // a critical section
	HeldLost    = "lost"      // a critical section whose lock was lost while inside
	Overlap     = "overlap"   // two inside at once, not explained by a fault
	Explained   = "explained" // two inside at once, explained by an injected fault
	Accepted    = "accepted"  // a write the resource accepted
	Rejected    = "rejected"  // a write (or fenced read) the resource refused as stale
	Paused      = "paused"    // the client was stopped (SIGSTOP)
	Network     = "network"   // latency, silence or cut connections on its links
	ServerFault = "server"    // a lock server killed, restarted, a session ended
	Note        = "note"      // anything else worth a band
)

var colours = map[string]string{
	Held: "#4a7bd0", HeldLost: "#e0a030", Overlap: "#e01818", Explained: "#f0b0b0",
	Accepted: "#1a9a3a", Rejected: "#d01010", Paused: "#909090", Network: "#9b59b6",
	ServerFault: "#e67e22", Note: "#7f8c8d",
}

var legend = []struct{ kind, text string }{
	{Held, "critical section"}, {HeldLost, "section whose lock was lost"},
	{Overlap, "overlap, unexplained"}, {Explained, "overlap explained by a fault"},
	{Accepted, "write accepted"}, {Rejected, "stale write (or release) refused"},
	{Paused, "paused or stalled"}, {Network, "network fault"}, {ServerFault, "server fault"},
}

type bar struct {
	lane     int
	from, to time.Time
	kind     string
	title    string
}

type mark struct {
	lane  int
	at    time.Time
	kind  string
	title string
}

// Recorder collects a timeline. Its methods are safe for concurrent use,
// and do nothing on a nil *Recorder, so code can record unconditionally.
type Recorder struct {
	mu    sync.Mutex
	title string
	lanes []string
	index map[string]int
	bars  []bar // sections, lane overlaps, and per-lane faults
	bands []bar // faults across every lane (lane -1)
	marks []mark
	notes []string
}

// New returns a Recorder for a picture with the given title.
func New(title string) *Recorder { return &Recorder{title: title, index: map[string]int{}} }

// lane returns the lane's index, adding it below the others.
func (r *Recorder) lane(name string) int {
	i, ok := r.index[name]
	if !ok {
		i = len(r.lanes)
		r.index[name] = i
		r.lanes = append(r.lanes, name)
	}
	return i
}

// Lane adds a lane now, so lanes appear in the order they are declared.
func (r *Recorder) Lane(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lane(name)
}

// Bar draws kind (Held, HeldLost, Overlap, Explained, Paused, Network,
// ServerFault, Note) on lane from from to to; title is its tooltip.
func (r *Recorder) Bar(lane string, from, to time.Time, kind, title string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bars = append(r.bars, bar{r.lane(lane), from, to, kind, title})
}

// Band draws kind across every lane from from to to (a server fault).
func (r *Recorder) Band(from, to time.Time, kind, title string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bands = append(r.bands, bar{-1, from, to, kind, title})
}

// Mark draws an event (Accepted, Rejected) on lane at at.
func (r *Recorder) Mark(lane string, at time.Time, kind, title string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, mark{r.lane(lane), at, kind, title})
}

// Notef adds a line of text below the picture (a verdict, a count).
func (r *Recorder) Notef(format string, args ...any) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Layout, in pixels.
const (
	labelW   = 190
	laneH    = 30
	barH     = 16
	topM     = 56
	rightM   = 30
	pxPerSec = 60.0
	minPlot  = 900
	maxPlot  = 8000
)

// WriteFile writes the picture to path: an HTML page embedding it when the
// name ends in .html or .htm, SVG otherwise.
func (r *Recorder) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".html" || ext == ".htm" {
		fmt.Fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title></head>\n<body style=\"margin:0\">\n", html.EscapeString(r.title))
		err = r.SVG(f)
		fmt.Fprintf(f, "\n</body></html>\n")
	} else {
		err = r.SVG(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SVG writes the picture as a standalone SVG document.
func (r *Recorder) SVG(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var start, end time.Time
	span := func(t time.Time) {
		if start.IsZero() || t.Before(start) {
			start = t
		}
		if end.IsZero() || t.After(end) {
			end = t
		}
	}
	for _, b := range append(r.bars, r.bands...) {
		span(b.from)
		span(b.to)
	}
	for _, m := range r.marks {
		span(m.at)
	}
	if start.IsZero() {
		start = time.Now()
	}
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	dur := end.Sub(start)
	plotW := math.Min(math.Max(dur.Seconds()*pxPerSec, minPlot), maxPlot)
	x := func(t time.Time) float64 { return labelW + plotW*float64(t.Sub(start))/float64(dur) }
	laneY := func(l int) float64 { return topM + float64(l)*laneH }
	width := labelW + plotW + rightM
	plotBottom := laneY(len(r.lanes))
	legendY := plotBottom + 34
	// The legend wraps at the picture's width.
	type item struct{ x, y float64 }
	var items []item
	lx, ly := 10.0, legendY
	for _, l := range legend {
		w := 26 + float64(len(l.text))*6.4
		if lx+w > width-10 && lx > 10 {
			lx, ly = 10, ly+18
		}
		items = append(items, item{lx, ly})
		lx += w
	}
	notesY := ly + 26
	height := notesY + float64(len(r.notes))*18 + 10

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", esc(r.title))

	// Lanes and the time axis.
	for i, name := range r.lanes {
		y := laneY(i)
		if i%2 == 0 {
			p(`<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="#f4f6f8"/>`+"\n", labelW, y, plotW, laneH)
		}
		p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", labelW-8, y+laneH/2+4, esc(name))
	}
	step := tick(dur, plotW)
	for t := time.Duration(0); t <= dur; t += step {
		xx := x(start.Add(t))
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#dde" stroke-width="1"/>`+"\n", xx, topM-6, xx, plotBottom)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", xx, topM-10, fmtTick(t))
	}

	// Bands across all lanes, behind everything else.
	for _, bd := range r.bands {
		x0, x1 := x(bd.from), math.Max(x(bd.to), x(bd.from)+2)
		p(`<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.25"><title>%s</title></rect>`+"\n",
			x0, topM, x1-x0, plotBottom-topM, colours[bd.kind], esc(bd.title))
		p(`<rect x="%.1f" y="%d" width="%.1f" height="5" fill="%s"><title>%s</title></rect>`+"\n", x0, topM-5, x1-x0, colours[bd.kind], esc(bd.title))
	}
	// Faults on a lane, then sections, then overlaps on top.
	order := map[string]int{Paused: 0, Network: 0, ServerFault: 0, Note: 0, Held: 1, HeldLost: 1, Explained: 2, Overlap: 3}
	bars := append([]bar(nil), r.bars...)
	sort.SliceStable(bars, func(i, j int) bool { return order[bars[i].kind] < order[bars[j].kind] })
	for _, br := range bars {
		y := laneY(br.lane)
		x0, x1 := x(br.from), math.Max(x(br.to), x(br.from)+1.5)
		switch br.kind {
		case Paused, Network, ServerFault, Note:
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" fill-opacity="0.45"><title>%s</title></rect>`+"\n",
				x0, y+2, x1-x0, laneH-4, colours[br.kind], esc(br.title))
		case Overlap, Explained:
			if x1-x0 < 6 { // however short, an overlap must show
				x0, x1 = (x0+x1)/2-3, (x0+x1)/2+3
			}
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				x0, y+(laneH-barH)/2-3, x1-x0, barH+6, colours[br.kind], esc(br.title))
			if br.kind == Overlap {
				p(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold" text-anchor="middle">!</text>`+"\n", (x0+x1)/2, y+1, colours[Overlap])
			}
		default:
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" rx="2"><title>%s</title></rect>`+"\n",
				x0, y+(laneH-barH)/2, x1-x0, barH, colours[br.kind], esc(br.title))
		}
	}
	for _, m := range r.marks {
		xx, y := x(m.at), laneY(m.lane)+laneH/2
		switch m.kind {
		case Rejected:
			p(`<path d="M%.1f %.1f l8 8 m0 -8 l-8 8" stroke="%s" stroke-width="2.5"><title>%s</title></path>`+"\n",
				xx-4, y-4, colours[Rejected], esc(m.title))
		default:
			p(`<path d="M%.1f %.1f l5 -9 l5 9 z" fill="%s" stroke="white" stroke-width="0.8"><title>%s</title></path>`+"\n",
				xx-5, y+4, colours[Accepted], esc(m.title))
		}
	}

	// Legend and notes.
	for i, l := range legend {
		it := items[i]
		p(`<rect x="%.0f" y="%.1f" width="14" height="10" fill="%s"/>`+"\n", it.x, it.y-9, colours[l.kind])
		p(`<text x="%.0f" y="%.1f">%s</text>`+"\n", it.x+18, it.y, esc(l.text))
	}
	for i, n := range r.notes {
		p(`<text x="10" y="%.1f" font-family="monospace" xml:space="preserve">%s</text>`+"\n", notesY+float64(i)*18, esc(n))
	}
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// tick picks a round interval that gives a grid line every 80px or more.
func tick(dur time.Duration, plotW float64) time.Duration {
	for _, d := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
		100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute} {
		if plotW*float64(d)/float64(dur) >= 80 {
			return d
		}
	}
	return 10 * time.Minute
}

func fmtTick(t time.Duration) string {
	if t < time.Second && t > 0 {
		return fmt.Sprintf("%dms", t.Milliseconds())
	}
	return t.String()
}

func esc(s string) string { return html.EscapeString(s) }
