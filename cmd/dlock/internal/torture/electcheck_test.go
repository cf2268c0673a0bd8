package torture

import (
	"testing"
	"time"
)

// seen is an observer's report at ms: the leader w in term fence, or
// nobody (w < 0).
func seen(obs int, at int64, w int, fence uint64) Event {
	e := Event{T: at * ms, W: obs, Ev: evObserve, Key: "k0"}
	if w >= 0 {
		e.Held, e.Val, e.Fence = true, identity(w), fence
	}
	return e
}

// The election checker fails each way an observer can be wrong, and
// measures hand-offs. Worker 0 leads term 1 (10-50ms), worker 1 term 2
// (52-90ms, waiting from 20ms), then nobody leads until worker 0's term 3
// at 5000ms; observer 9 reports.
func TestCheckElection(t *testing.T) {
	terms := [][]Event{
		sec(0, "a", 1, 1, 2, 10, 50, 100),
		{{T: 20 * ms, W: 1, Ev: evWait, Key: "k0"}},
		sec(1, "b", 2, 3, 4, 52, 90, 150),
		sec(0, "c", 3, 5, 6, 5000, 5050, 5100),
	}
	for _, tc := range []struct {
		name    string
		reports []Event
		check   func(e *ElectionReport) bool
	}{
		{"truthful", []Event{seen(9, 5, -1, 0), seen(9, 15, 0, 1), seen(9, 55, 1, 2), seen(9, 100, -1, 0), seen(9, 5010, 0, 3)},
			func(e *ElectionReport) bool { return e.safe() && e.NobodyChecked == 1 && e.Reports == 5 }},
		{"a term going back", []Event{seen(9, 15, 0, 1), seen(9, 55, 1, 2), seen(9, 60, 0, 1)},
			func(e *ElectionReport) bool { return e.WentBack == 1 }},
		{"the old leader named long after", []Event{seen(9, 55, 1, 2), seen(9, 4000, 1, 2)},
			func(e *ElectionReport) bool { return e.Stale == 1 && e.NobodyMissed == 1 }},
		{"never nobody", []Event{seen(9, 15, 0, 1), seen(9, 55, 1, 2), seen(9, 5010, 0, 3)},
			func(e *ElectionReport) bool { return e.NobodyMissed == 1 && e.Stale == 0 }},
		{"another's identity", []Event{seen(9, 55, 0, 2)},
			func(e *ElectionReport) bool { return e.Misnamed == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := append(append([]Event{}, tc.reports...), concat(terms)...)
			cfg := &Config{Backend: Redis, TTL: 100 * time.Millisecond, Election: true, Observers: 1}
			r := check(cfg, events, nil, 0, 10_000*ms)
			if e := r.Election; !tc.check(e) {
				t.Fatalf("%+v", *e)
			}
			if r.Safe() != (tc.name == "truthful") {
				t.Fatalf("Safe() = %v", r.Safe())
			}
			if got := r.Election.AfterResign; len(got) != 1 || got[0] != 2*time.Millisecond {
				t.Fatalf("hand-offs after a resignation: %v, want [2ms]", got)
			}
		})
	}
}

func concat(ess [][]Event) []Event {
	var out []Event
	for _, es := range ess {
		out = append(out, es...)
	}
	return out
}

// A leader killed inside its term overlaps nobody who enters after its
// death, and the time to the next term is a hand-off after a SIGKILL.
func TestCheckKilledLeader(t *testing.T) {
	enter := sec(0, "a", 1, 1, 2, 10, 50, 100)[:1] // no exit: killed
	events := append(enter, Event{T: 20 * ms, W: 1, Ev: evWait, Key: "k0"})
	events = append(events, sec(1, "b", 2, 3, 4, 170, 200, 250)...)
	kill := Fault{Kind: FaultKill, Start: 60 * ms, End: 60 * ms, Worker: 0}
	cfg := &Config{Backend: Redis, TTL: 100 * time.Millisecond, Election: true}
	r := check(cfg, events, []Fault{kill}, 0, 10_000*ms)
	if len(r.Overlaps) != 0 || !r.Safe() {
		t.Fatalf("overlaps %+v, safe %v", r.Overlaps, r.Safe())
	}
	if got := r.Election.AfterKill; len(got) != 1 || got[0] != 110*time.Millisecond {
		t.Fatalf("hand-offs after a kill: %v, want [110ms]", got)
	}
	r = check(cfg, events, nil, 0, 10_000*ms) // the same without the kill: an overlap
	if r.Unexplained != 1 {
		t.Fatalf("without the kill: %d unexplained overlaps, want 1", r.Unexplained)
	}
}

// A worker killed between sending a write and its answer leaves only the
// call: the write may have landed, and a later read of its value is no
// violation.
func TestCheckKilledMidWrite(t *testing.T) {
	enter := sec(0, "a", 1, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""))
	enter = append(enter[:2], Event{T: 20 * ms, W: 0, Ev: evCall, Op: evWrite, Key: "k0", Tok: "a", Fence: 1, Val: "w0.1"})
	reader := sec(1, "b", 2, 3, 4, 170, 200, 250, op(evRead, 171, 172, outOK, "w0.1"))
	kill := Fault{Kind: FaultKill, Start: 60 * ms, End: 60 * ms, Worker: 0}
	r := checkEvents([]Fault{kill}, enter, reader)
	if r.Linearizable != "ok" || r.Unknown != 1 || !r.Safe() {
		t.Fatalf("linearizable %s, %d unknown, safe %v", r.Linearizable, r.Unknown, r.Safe())
	}
}

// A server that restarted empty may draw a fence twice: an observer that
// names either holder of that fence names a term rightly.
func TestCheckElectionFenceDrawnTwice(t *testing.T) {
	events := concat([][]Event{
		sec(0, "a", 7, 1, 2, 10, 50, 100),
		sec(1, "b", 7, 3, 4, 52, 90, 150),
		{seen(9, 15, 0, 7), seen(9, 55, 1, 7), seen(9, 200, -1, 0)},
	})
	cfg := &Config{Backend: Postgres, TTL: 100 * time.Millisecond, Election: true, Observers: 1}
	r := check(cfg, events, nil, 0, 10_000*ms)
	if e := r.Election; e.Misnamed != 0 || e.Unentered != 0 {
		t.Fatalf("%+v", *e)
	}
}
