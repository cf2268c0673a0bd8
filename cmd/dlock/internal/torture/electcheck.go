package torture

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// ElectionReport is the election scenario's part of a verdict: what the
// observers reported, checked against the terms the candidates ran, and
// how long the leadership took to change hands.
type ElectionReport struct {
	Observers int
	Reports   int // terms and "nobody"s the observers reported
	Errors    int // errors they reported (the backend unreachable)
	// Must be 0: a term below one the same observer reported before; a
	// leader reported more than lingerAfter past its term's end (a stale
	// leader); a term reported under another candidate's identity; an idle
	// stretch at whose end an observer still named a leader.
	WentBack, Stale, Misnamed, NobodyMissed int
	// Unentered are reported terms no candidate's function entered (a
	// grant whose function never ran, a worker killed as it began).
	Unentered int
	// NobodyChecked counts the idle stretches (nobody leading for longer
	// than lingerAfter) at whose end the observers were checked.
	NobodyChecked int
	// The hand-offs with a candidate waiting and no fault in between: from
	// a resignation, and from a SIGKILL of the leader, to the next term.
	AfterResign, AfterKill []time.Duration
}

func (e *ElectionReport) safe() bool {
	return e == nil || e.WentBack == 0 && e.Stale == 0 && e.Misnamed == 0 && e.NobodyMissed == 0
}

// lingerAfter is how long after a term ended an observer may still
// report it: a leader's lock can outlive its function by a TTL (its
// release lost, its holder killed) and a read by a round trip; and twice
// that for PostgreSQL's session lease (TTL + TTL/2).
func lingerAfter(ttl time.Duration) time.Duration { return 2*ttl + time.Second }

// checkElection checks the observers' reports (events of the workers
// after the candidates) against the sections, and measures hand-offs.
func checkElection(cfg *Config, r *Report, events []Event) *ElectionReport {
	e := &ElectionReport{Observers: cfg.Observers}
	linger := int64(lingerAfter(cfg.TTL))
	// A fence may be drawn twice when a server restarted empty (its
	// counter lost with its data; the guard's tie rule refuses the second
	// writer): a report names a term rightly if any section of its fence
	// has its identity.
	byFence := map[string]map[uint64][]*Section{}
	for _, s := range r.Sections {
		if byFence[s.Key] == nil {
			byFence[s.Key] = map[uint64][]*Section{}
		}
		byFence[s.Key][s.Fence] = append(byFence[s.Key][s.Fence], s)
	}
	reports := map[[2]any][]Event{} // by observer and key
	for _, ev := range events {
		if ev.Ev == evObserve {
			k := [2]any{ev.W, ev.Key}
			reports[k] = append(reports[k], ev)
		}
	}
	for _, rs := range reports {
		var high uint64
		for _, ev := range rs {
			if ev.Err != "" {
				e.Errors++
				continue
			}
			e.Reports++
			if !ev.Held || ev.Fence == 0 {
				continue
			}
			if ev.Fence < high {
				e.WentBack++
			}
			high = max(high, ev.Fence)
			s := named(byFence[ev.Key][ev.Fence], ev.Val)
			switch {
			case s == nil:
				e.Unentered++
			case ev.Val != identity(s.W):
				e.Misnamed++
			case ev.T > sectionEnd(s, r.End)+linger:
				e.Stale++
			}
		}
	}
	e.checkNobody(r, reports, linger)
	e.AfterResign, e.AfterKill = handoffs(r, events, r.Faults)
	return e
}

// named returns the section of ss whose worker has identity id, or else
// the first (nil when there is none).
func named(ss []*Section, id string) *Section {
	for _, s := range ss {
		if identity(s.W) == id {
			return s
		}
	}
	if len(ss) == 0 {
		return nil
	}
	return ss[0]
}

// sectionEnd is when a section's holder let go: its exit, or its death.
func sectionEnd(s *Section, runEnd int64) int64 {
	switch {
	case s.Exit != 0:
		return s.Exit
	case s.Killed != 0:
		return s.Killed
	}
	return runEnd
}

// checkNobody finds, key by key, the stretches in which no candidate led
// for longer than linger, and checks that at the end of each every
// observer's last report named nobody (an observer whose last answer was
// an error is not counted).
func (e *ElectionReport) checkNobody(r *Report, reports map[[2]any][]Event, linger int64) {
	byKey := map[string][]*Section{}
	for _, s := range r.Sections {
		byKey[s.Key] = append(byKey[s.Key], s)
	}
	for key, ss := range byKey {
		slices.SortFunc(ss, func(a, b *Section) int { return cmp.Compare(a.Grant, b.Grant) })
		busy := int64(math.MinInt64)
		for i, s := range ss {
			if i > 0 && s.Grant-busy > linger {
				at := busy + linger // the stretch's end, as far as an observer must have seen
				e.NobodyChecked++
				for k, rs := range reports {
					if k[1] != key {
						continue
					}
					if last, ok := lastBefore(rs, at); ok && last.Err == "" && last.Held {
						e.NobodyMissed++
					}
				}
			}
			busy = max(busy, sectionEnd(s, r.End))
		}
	}
}

// lastBefore returns the last report at or before t.
func lastBefore(rs []Event, t int64) (Event, bool) {
	i, _ := slices.BinarySearchFunc(rs, t+1, func(ev Event, t int64) int { return cmp.Compare(ev.T, t) })
	if i == 0 {
		return Event{}, false
	}
	return rs[i-1], true
}

// handoffs measures, key by key, the time from a resignation (a section
// that ended by itself) or a SIGKILL of the leader to the next term, when
// another candidate was campaigning at that moment and no fault came in
// between.
func handoffs(r *Report, events []Event, faults []Fault) (resign, kill []time.Duration) {
	campaigning := campaigns(events)
	byKey := map[string][]*Section{}
	for _, s := range r.Sections {
		byKey[s.Key] = append(byKey[s.Key], s)
	}
	for key, ss := range byKey {
		slices.SortFunc(ss, func(a, b *Section) int { return cmp.Compare(a.Grant, b.Grant) })
		for i, a := range ss {
			from := a.Exit
			if a.Killed != 0 {
				from = a.Killed
			} else if a.Exit == 0 || a.Cause != "" {
				continue // lost, stopped, or never ended: no resignation
			}
			if i+1 == len(ss) || !campaigning(key, a.W, from) || faultBetween(faults, from, ss[i+1].Grant, a.Killed) {
				continue
			}
			d := time.Duration(ss[i+1].Grant - from)
			if a.Killed != 0 {
				kill = append(kill, d)
			} else {
				resign = append(resign, d)
			}
		}
	}
	slices.Sort(resign)
	slices.Sort(kill)
	return resign, kill
}

// campaigns returns a function that says whether a candidate other than
// w campaigned for key at t: between its wait event and its next entry
// or end of its Lead.
func campaigns(events []Event) func(key string, w int, t int64) bool {
	type span struct {
		w        int
		from, to int64
	}
	spans := map[string][]span{}
	open := map[int]Event{}
	for _, ev := range events {
		switch ev.Ev {
		case evWait:
			open[ev.W] = ev
		case evEnter, evDone:
			if o, ok := open[ev.W]; ok {
				spans[o.Key] = append(spans[o.Key], span{ev.W, o.T, ev.T})
				delete(open, ev.W)
			}
		}
	}
	return func(key string, w int, t int64) bool {
		for _, s := range spans[key] {
			if s.w != w && s.from < t && s.to > t {
				return true
			}
		}
		return false
	}
}

// faultBetween reports whether a fault other than the kill at killed was
// under way between from and to.
func faultBetween(faults []Fault, from, to, killed int64) bool {
	for _, f := range faults {
		if f.Start <= to && f.End >= from && !(f.Kind == FaultKill && f.Start == killed) && f.Kind != "setup" && f.Kind != FaultFastClock {
			return true
		}
	}
	return false
}

// print writes the election's lines of the verdict.
func (e *ElectionReport) print(p func(format string, args ...any), mark func(int) string) {
	p("  observers: reports / errors                 %6d / %d\n", e.Reports, e.Errors)
	p("  observed terms going back                   %6d  %s\n", e.WentBack, mark(e.WentBack))
	p("  leaders reported after their term ended     %6d  %s\n", e.Stale, mark(e.Stale))
	p("  terms reported under another's identity     %6d  %s\n", e.Misnamed, mark(e.Misnamed))
	p("  idle stretches checked / nobody not seen    %6d / %d  %s\n", e.NobodyChecked, e.NobodyMissed, mark(e.NobodyMissed))
	if e.Unentered > 0 {
		p("  reported terms no candidate entered         %6d\n", e.Unentered)
	}
	p("  hand-off after a resignation                %s\n", durations(e.AfterResign))
	p("  hand-off after a SIGKILL of the leader      %s\n", durations(e.AfterKill))
}

// durations summarizes sorted durations: count, median, 99th percentile
// and maximum.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "     none"
	}
	q := func(f float64) time.Duration { return ds[int(f*float64(len(ds)-1))].Round(100 * time.Microsecond) }
	return fmt.Sprintf("%6d  (p50 %v, p99 %v, max %v)", len(ds), q(0.5), q(0.99), ds[len(ds)-1].Round(100*time.Microsecond))
}
