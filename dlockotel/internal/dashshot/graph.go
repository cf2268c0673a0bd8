package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// graph draws a timeseries panel: axes, one polyline (or bars) per
// series, the legend below.
func graph(p panel, w, h int, start, end time.Time) string {
	ls := lines(p)
	legendRows := (len(ls) + 2) / 3
	const left, bottom = 56, 18
	gw, gh := w-left-10, h-titleH-bottom-8-legendRows*15
	top := 0.0
	for _, l := range ls {
		for _, pt := range l.points {
			top = math.Max(top, pt.v)
		}
	}
	step := niceStep(top / 4)
	top = math.Max(step*math.Ceil(top/step), step)
	sx := func(t time.Time) float64 { return left + float64(gw)*t.Sub(start).Seconds()/end.Sub(start).Seconds() }
	sy := func(v float64) float64 { return 4 + float64(gh)*(1-v/top) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d">`, w, h-titleH-legendRows*15-4)
	for v := 0.0; v <= top*1.0001; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#2c3235"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			left, left+gw, sy(v), sy(v), left-6, sy(v)+3, html.EscapeString(format(v, p.FieldConfig.Defaults.Unit)))
	}
	for i, anchor := range []string{"start", "middle", "middle", "middle", "end"} {
		t := start.Add(time.Duration(i) * end.Sub(start) / 4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s">%s</text>`, sx(t), gh+4+bottom-4, anchor, t.Format("15:04:05"))
	}
	bars := p.FieldConfig.Defaults.Custom.DrawStyle == "bars"
	barW := 4.0 // the series' bars side by side within one step
	for _, l := range ls {
		if len(l.points) > 1 {
			barW = 0.8 * (sx(l.points[1].t) - sx(l.points[0].t)) / float64(len(ls))
			break
		}
	}
	for i, l := range ls {
		color := palette[i%len(palette)]
		if bars {
			for _, pt := range l.points {
				if pt.v > 0 {
					x := sx(pt.t) - barW*float64(len(ls))/2 + float64(i)*barW
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x, sy(pt.v), barW, sy(0)-sy(pt.v), color)
				}
			}
			continue
		}
		var pts []string
		for _, pt := range l.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(pt.t), sy(pt.v)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, color, strings.Join(pts, " "))
	}
	b.WriteString(`</svg><div class="legend">`)
	for i, l := range ls {
		fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s</span> `, palette[i%len(palette)], html.EscapeString(l.name))
	}
	b.WriteString(`</div>`)
	return b.String()
}

// niceStep rounds d up to 1, 2 or 5 times a power of ten.
func niceStep(d float64) float64 {
	if d <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(d)))
	for _, m := range []float64{1, 2, 5, 10} {
		if d <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// format shows v in Grafana's units: s, ops (per second) or none.
func format(v float64, unit string) string {
	num := func(x float64) string { return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", x), "0"), ".") }
	switch unit {
	case "s":
		switch {
		case v == 0:
			return "0 s"
		case v < 1e-3:
			return num(v*1e6) + " µs"
		case v < 1:
			return num(v*1e3) + " ms"
		}
		return num(v) + " s"
	case "ops":
		return num(v) + " ops/s"
	}
	return num(v)
}
