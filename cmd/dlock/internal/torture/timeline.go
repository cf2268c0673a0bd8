package torture

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
)

func wall(ns int64) time.Time { return time.Unix(0, ns) }

// writeTimeline draws the run: a lane per worker, its sections, the
// writes the guard accepted and rejected, the faults, and the overlaps.
func writeTimeline(path string, workers int, r *Report) error {
	tl := timeline.New("dlock torture: " + r.Config)
	lane := func(w int) string { return "worker " + strconv.Itoa(w) }
	for w := range workers {
		tl.Lane(lane(w))
	}
	end := func(s *Section) int64 {
		if s.Exit == 0 {
			return r.End
		}
		return s.Exit
	}
	for _, s := range r.Sections {
		kind := timeline.Held
		if s.Cause == "lost" {
			kind = timeline.HeldLost
		}
		tl.Bar(lane(s.W), wall(s.Grant), wall(end(s)), kind, fmt.Sprintf("%s fence %d, oracle seq %d-%d, held %v%s",
			s.Key, s.Fence, s.In, s.Out, time.Duration(end(s)-s.Grant).Round(time.Millisecond), map[bool]string{true: ", lock lost inside"}[s.Cause == "lost"]))
	}
	for _, o := range r.Overlaps {
		a, b := o.Inside, o.Entered
		from, to := wall(b.Grant), wall(min(end(a), end(b)))
		kind, why := timeline.Explained, "explained: "+o.Reason
		if o.Reason == "" {
			kind, why = timeline.Overlap, "UNEXPLAINED"
		}
		title := fmt.Sprintf("%s: workers %d and %d inside at once (fences %d, %d): %s", a.Key, a.W, b.W, a.Fence, b.Fence, why)
		tl.Bar(lane(a.W), from, to, kind, title)
		tl.Bar(lane(b.W), from, to, kind, title)
	}
	for _, op := range r.Ops {
		name := "read (registers the fence)"
		if op.Write {
			name = "write " + op.Val
		}
		title := fmt.Sprintf("%s %s with fence %d: %s", op.Key, name, op.Fence, op.Out)
		switch {
		case op.Out == outStale || op.Out == outTie:
			tl.Mark(lane(op.W), wall(op.Return), timeline.Rejected, title)
		case op.Write && op.Out == outOK:
			tl.Mark(lane(op.W), wall(op.Return), timeline.Accepted, title)
		}
	}
	for _, f := range r.Faults {
		title := f.String()
		switch {
		case f.Kind == FaultPause:
			tl.Bar(lane(f.Worker), wall(f.Start), wall(f.End), timeline.Paused, title)
		case f.network():
			tl.Bar(lane(f.Worker), wall(f.Start), wall(f.End), timeline.Network, title)
		case f.server():
			tl.Band(wall(f.Start), wall(f.End), timeline.ServerFault, title)
		default:
			tl.Band(wall(f.Start), wall(f.End), timeline.Note, title)
		}
	}
	var verdict bytes.Buffer
	r.Print(&verdict)
	for _, line := range strings.Split(strings.TrimSpace(verdict.String()), "\n") {
		if !strings.HasPrefix(line, "      at ") { // each unexplained overlap has its tooltip
			tl.Notef("%s", line)
		}
	}
	return tl.WriteFile(path)
}
