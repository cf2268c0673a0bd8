package main

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// dashboard is what the render reads of dashboard.json.
type dashboard struct {
	Title  string
	Panels []panel
}

type panel struct {
	Type, Title string
	Interval    string // the panel's minimum interval ("1m"): its step, and $__interval
	GridPos     struct{ X, Y, W, H int }
	Targets     []struct {
		Expr, LegendFormat string
	}
	FieldConfig struct {
		Defaults struct {
			Unit       string
			Decimals   *int
			Custom     struct{ DrawStyle string }
			Thresholds struct {
				Steps []struct {
					Color string
					Value *float64
				}
			}
		}
	}
	data [][]series // per target, filled by the caller
}

const (
	pageWidth = 1600
	rowHeight = 30 // Grafana's grid: a row is 30px, with 8px between
	gap       = 8
	titleH    = 28
)

// namedColors are Grafana's names for its threshold colors.
var namedColors = map[string]string{"green": "#73BF69", "red": "#F2495C", "blue": "#5794F2", "yellow": "#FADE2A", "orange": "#FF9830"}

var palette = []string{"#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#FADE2A", "#37872D", "#C4162A"}

// render draws the dashboard as HTML: each panel where its gridPos puts
// it, its series from Prometheus.
func render(d dashboard, note string, start, end time.Time) string {
	col := float64(pageWidth-2*gap) / 24
	var b strings.Builder
	height := pageHeight(d) - 110
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><style>
body{margin:0;background:#111217;color:#ccccdc;font:13px Inter,Helvetica,Arial,sans-serif;width:%dpx}
.top{padding:10px %dpx;border-bottom:1px solid #2c3235}.top h1{font-size:18px;margin:0 0 4px;font-weight:500}
.vars span{background:#181b1f;border:1px solid #2c3235;padding:2px 8px;margin-right:8px}
.note{color:#8e8e8e;font-size:12px;margin-top:6px}
.grid{position:relative;height:%dpx;margin:%dpx}
.p{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;overflow:hidden}
.p h2{font-size:13px;font-weight:500;margin:0;padding:6px 8px;height:16px}
.stat{font-size:40px;font-weight:500;text-align:center}
.legend{padding:0 8px;font-size:11px;line-height:15px}.legend i{display:inline-block;width:12px;height:3px;margin:0 4px 3px 8px}
svg text{fill:#8e8e8e;font-size:10px}
</style></head><body><div class="top"><h1>%s</h1>
<div class="vars"><span>Data source: Prometheus</span><span>Backend: All</span><span>%s to %s</span></div>
<div class="note">%s</div></div><div class="grid">`,
		pageWidth, gap, height, gap, html.EscapeString(d.Title),
		start.Format("15:04:05"), end.Format("15:04:05"), html.EscapeString(note))
	for _, p := range d.Panels {
		x, y := float64(p.GridPos.X)*col, p.GridPos.Y*(rowHeight+gap)
		w, h := float64(p.GridPos.W)*col-gap, p.GridPos.H*(rowHeight+gap)-gap
		fmt.Fprintf(&b, `<div class="p" style="left:%.0fpx;top:%dpx;width:%.0fpx;height:%dpx"><h2>%s</h2>`,
			x, y, w, h, html.EscapeString(p.Title))
		if p.Type == "stat" {
			b.WriteString(stat(p, h))
		} else {
			b.WriteString(graph(p, int(w), h, start, end))
		}
		b.WriteString("</div>")
	}
	b.WriteString("</div></body></html>\n")
	return b.String()
}

func stat(p panel, h int) string {
	v := 0.0
	for _, ss := range p.data {
		for _, s := range ss {
			if len(s.points) > 0 {
				v += s.points[len(s.points)-1].v
			}
		}
	}
	// The color of the last threshold step the value reaches.
	color := "#5794F2"
	for _, st := range p.FieldConfig.Defaults.Thresholds.Steps {
		if st.Value == nil || v >= *st.Value {
			color = cmp.Or(namedColors[st.Color], st.Color)
		}
	}
	return fmt.Sprintf(`<div class="stat" style="color:%s;line-height:%dpx">%s</div>`, color, h-titleH-8, format(round(v, p.FieldConfig.Defaults.Decimals), p.FieldConfig.Defaults.Unit))
}

// round rounds v to decimals places (2 when the panel does not say).
func round(v float64, decimals *int) float64 {
	p := math.Pow(10, float64(ptrOr(decimals, 2)))
	return math.Round(v*p) / p
}

func ptrOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// line is one series of a graph, named by its target's legend format.
type line struct {
	name   string
	points []point
}

func lines(p panel) []line {
	var out []line
	for i, ss := range p.data {
		for _, s := range ss {
			name := legendLabel.ReplaceAllStringFunc(p.Targets[i].LegendFormat, func(m string) string {
				return s.labels[legendLabel.FindStringSubmatch(m)[1]]
			})
			if name = strings.Join(strings.Fields(name), " "); name == "" {
				name = p.Targets[i].Expr
			}
			out = append(out, line{name, s.points})
		}
	}
	slices.SortStableFunc(out, func(a, b line) int { return strings.Compare(a.name, b.name) })
	return out
}
