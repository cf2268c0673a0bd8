package torture

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// sec returns the events of one section of worker w on key k0: grant and
// exit times in ms, oracle sequence numbers in and out, validity at exit.
func sec(w int, tok string, fence uint64, in, out, grant, exit, valid int64, ops ...Event) []Event {
	es := []Event{{T: grant * ms, W: w, Ev: evEnter, Key: "k0", Tok: tok, Fence: fence, Seq: in, Valid: valid * ms}}
	for _, op := range ops {
		op.W, op.Key, op.Tok, op.Fence = w, "k0", tok, fence
		es = append(es, op)
	}
	return append(es, Event{T: exit * ms, W: w, Ev: evExit, Key: "k0", Tok: tok, Fence: fence, Seq: out, Valid: valid * ms, Held: true})
}

func op(ev string, call, ret int64, out, val string) Event {
	return Event{Ev: ev, T0: call * ms, T: ret * ms, Out: out, Val: val}
}

// call is the event of an operation called (its return event follows).
func call(ev string, at int64, val string) Event {
	return Event{Ev: evCall, T0: at * ms, T: at * ms, Op: ev, W: 0, Key: "k0", Tok: "a", Fence: 1, Val: val}
}

func checkEvents(faults []Fault, workers ...[]Event) *Report {
	var events []Event
	for _, w := range workers {
		events = append(events, w...)
	}
	cfg := &Config{Backend: Redis, TTL: 100 * time.Millisecond}
	return check(cfg, events, faults, 0, 10_000*ms)
}

func TestCheckOverlaps(t *testing.T) {
	pauseA := Fault{Kind: FaultPause, Start: 20 * ms, End: 200 * ms, Worker: 0}
	restart := Fault{Kind: FaultRestart, Start: 20 * ms, End: 21 * ms, Worker: -1}
	blackholeA := Fault{Kind: FaultBlackhole, Start: 20 * ms, End: 150 * ms, Worker: 0}
	blackholeB := Fault{Kind: FaultBlackhole, Start: 20 * ms, End: 150 * ms, Worker: 1}
	for _, tc := range []struct {
		name   string
		a, b   []Event
		faults []Fault
		want   string // the reason, "" for unexplained, "none" for no overlap
	}{
		// A holds 10-50ms (valid until 100ms); B enters after A's exit.
		{"hand-off", sec(0, "a", 1, 1, 2, 10, 50, 100), sec(1, "b", 2, 3, 4, 51, 60, 150), nil, "none"},
		// B is granted at 60ms while A still believes until 100ms.
		{"double grant", sec(0, "a", 1, 1, 3, 10, 80, 100), sec(1, "b", 2, 2, 4, 60, 90, 150), nil, ""},
		{"double grant after a restart", sec(0, "a", 1, 1, 3, 10, 80, 100), sec(1, "b", 2, 2, 4, 60, 90, 150), []Fault{restart}, reasonServer},
		// A paused is not enough: B was granted while A still believed.
		{"double grant, A paused", sec(0, "a", 1, 1, 3, 10, 80, 100), sec(1, "b", 2, 2, 4, 60, 90, 150), []Fault{pauseA}, ""},
		// A overran its validity (100ms); B was granted at 120ms.
		{"overrun, A paused", sec(0, "a", 1, 1, 3, 10, 210, 100), sec(1, "b", 2, 2, 4, 120, 220, 200), []Fault{pauseA}, reasonPause},
		{"overrun, no fault", sec(0, "a", 1, 1, 3, 10, 210, 100), sec(1, "b", 2, 2, 4, 120, 220, 200), nil, ""},
		{"overrun, A cut off", sec(0, "a", 1, 1, 3, 10, 210, 100), sec(1, "b", 2, 2, 4, 120, 220, 200), []Fault{blackholeA}, reasonLease},
		{"overrun, B cut off", sec(0, "a", 1, 1, 3, 10, 210, 100), sec(1, "b", 2, 2, 4, 120, 220, 200), []Fault{blackholeB}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkEvents(tc.faults, tc.a, tc.b)
			switch {
			case tc.want == "none" && len(r.Overlaps) != 0:
				t.Fatalf("overlaps %+v, want none", r.Overlaps)
			case tc.want == "none":
			case len(r.Overlaps) != 1:
				t.Fatalf("%d overlaps, want 1", len(r.Overlaps))
			case r.Overlaps[0].Reason != tc.want:
				t.Fatalf("reason %q, want %q", r.Overlaps[0].Reason, tc.want)
			case (tc.want == "") != (r.Unexplained == 1) || (tc.want == "") == r.Safe():
				t.Fatalf("unexplained %d, safe %v", r.Unexplained, r.Safe())
			}
		})
	}
}

func TestCheckRegister(t *testing.T) {
	for _, tc := range []struct {
		name        string
		a, b        []Event
		below, same int
		linear      string
	}{
		{"fenced hand-off",
			sec(0, "a", 1, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 20, 21, outOK, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outOK, "a1"), op(evWrite, 54, 55, outOK, "b1")),
			0, 0, "ok"},
		// A paused past its lease: B registers fence 2; A's late write
		// with fence 1 is refused. Legal.
		{"stale write refused",
			sec(0, "a", 1, 1, 3, 10, 300, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 250, 251, outStale, "a1")),
			sec(1, "b", 2, 2, 4, 120, 200, 250, op(evRead, 121, 122, outOK, ""), op(evWrite, 130, 131, outOK, "b1")),
			0, 0, "ok"},
		// The same, with the stale write accepted: no guard.
		{"stale write accepted",
			sec(0, "a", 1, 1, 3, 10, 300, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 250, 251, outOK, "a1")),
			sec(1, "b", 2, 2, 4, 120, 200, 250, op(evRead, 121, 122, outOK, ""), op(evWrite, 130, 131, outOK, "b1")),
			1, 0, "illegal"},
		// Two holders with fence 2 (a rewound counter): the second's read
		// must be refused by the tie rule; a >= guard accepts it.
		{"tie refused",
			sec(0, "a", 2, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 20, 21, outOK, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outTie, "")),
			0, 0, "ok"},
		{"tie accepted",
			sec(0, "a", 2, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 20, 21, outOK, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outOK, "a1"), op(evWrite, 54, 55, outOK, "b1")),
			0, 1, "illegal"},
		// A read that returns a value nobody wrote last: a lost update.
		{"lost update",
			sec(0, "a", 1, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 20, 21, outOK, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outOK, "")),
			0, 0, "illegal"},
		// A write without an answer may have landed or not: both reads
		// are legal.
		{"unknown write, seen",
			sec(0, "a", 1, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 20, 21, outUnknown, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outOK, "a1")),
			0, 0, "ok"},
		{"unknown write, not seen",
			sec(0, "a", 1, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""), op(evWrite, 20, 21, outUnknown, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outOK, "")),
			0, 0, "ok"},
		// A killed during its write, which landed: the call is all its
		// worker told; B reads what A wrote.
		{"killed mid-write, landed",
			append(sec(0, "a", 1, 1, 2, 10, 50, 100, op(evRead, 11, 12, outOK, ""))[:2], call(evWrite, 20, "a1")),
			sec(1, "b", 2, 3, 4, 51, 60, 150, op(evRead, 52, 53, outOK, "a1")),
			0, 0, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkEvents(nil, tc.a, tc.b)
			if r.BelowAccepted != tc.below || r.SameFence != tc.same || r.Linearizable != tc.linear {
				t.Fatalf("below %d, same fence %d, linearizable %s; want %d, %d, %s", r.BelowAccepted, r.SameFence, r.Linearizable, tc.below, tc.same, tc.linear)
			}
		})
	}
}

// A handle whose validity ran out (Held false) must have had its context
// cancelled with ErrLockLost.
func TestCheckLossSignalled(t *testing.T) {
	a := sec(0, "a", 1, 1, 2, 10, 150, 100)
	a[len(a)-1].Held = false
	if r := checkEvents(nil, a); r.NotTold != 1 || r.Safe() {
		t.Fatalf("not told %d, safe %v; want 1, false", r.NotTold, r.Safe())
	}
	a[len(a)-1].Cause, a[len(a)-1].Lost = "lost", 100*ms
	if r := checkEvents(nil, a); r.NotTold != 0 || r.Lost != 1 || !r.Safe() {
		t.Fatalf("not told %d, lost %d, safe %v; want 0, 1, true", r.NotTold, r.Lost, r.Safe())
	}
}

// The longest wait with the lock free counts only what no fault explains,
// and nothing before the run's first grant (the workers connecting).
func TestCheckGap(t *testing.T) {
	late := append([]Event{{T: 0, W: 0, Ev: evWait, Key: "k0"}}, sec(0, "a", 1, 1, 2, 400, 450, 500)...)
	if r := checkEvents(nil, late); r.LongestGap != 0 {
		t.Fatalf("gap %v before the first grant, want 0", r.LongestGap)
	}
	a := append([]Event{{T: 0, W: 0, Ev: evWait, Key: "k0"}}, sec(0, "a", 1, 1, 2, 10, 50, 100)...)
	b := append([]Event{{T: 20 * ms, W: 1, Ev: evWait, Key: "k0"}}, sec(1, "b", 2, 3, 4, 300, 310, 400)...)
	if r := checkEvents(nil, a, b); r.LongestGap != 250*time.Millisecond {
		t.Fatalf("gap %v, want 250ms", r.LongestGap)
	}
	cut := Fault{Kind: FaultCut, Start: 40 * ms, End: 40 * ms, Worker: 0}
	if r := checkEvents([]Fault{cut}, a, b); r.LongestGap != 60*time.Millisecond { // after 40ms + 2 TTLs
		t.Fatalf("gap %v, want 60ms", r.LongestGap)
	}
}

// A semaphore of 2: a third holder inside with two others is an
// over-admission, unless a fault explains one of the two (a holder paused
// past its validity); a killed holder's section ends at the kill.
func TestCheckOverAdmissions(t *testing.T) {
	pauseA := Fault{Kind: FaultPause, Start: 20 * ms, End: 200 * ms, Worker: 0}
	killA := Fault{Kind: FaultKill, Start: 30 * ms, End: 30 * ms, Worker: 0}
	killLate := Fault{Kind: FaultKill, Start: 150 * ms, End: 150 * ms, Worker: 0}
	check2 := func(faults []Fault, secs ...[]Event) *Report {
		var events []Event
		for _, s := range secs {
			events = append(events, s...)
		}
		return check(&Config{Backend: Redis, TTL: 100 * time.Millisecond, Limit: 2}, events, faults, 0, 10_000*ms)
	}
	// A 10-210 (valid until 100), B 15-220, C enters at 120 while both are
	// inside: the oracle has 3 inside a semaphore of 2.
	a := sec(0, "a", 1, 1, 5, 10, 210, 100)
	b := sec(1, "b", 2, 2, 6, 15, 220, 300)
	c := sec(2, "c", 3, 3, 7, 120, 230, 300)
	for _, tc := range []struct {
		name   string
		secs   [][]Event
		faults []Fault
		want   string // the reason, "" for unexplained, "none" for none
	}{
		{"two inside", [][]Event{a, b}, nil, "none"},
		{"three inside", [][]Event{a, b, c}, nil, ""},
		{"three inside, A paused past its validity", [][]Event{a, b, c}, []Fault{pauseA}, reasonPause},
		{"A killed before C entered", [][]Event{a[:1], b, c}, []Fault{killA}, "none"},
		{"A killed after C entered", [][]Event{a[:1], b, c}, []Fault{killLate}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := check2(tc.faults, tc.secs...)
			switch {
			case tc.want == "none" && len(r.Overlaps) != 0:
				t.Fatalf("over-admissions %+v, want none", r.Overlaps)
			case tc.want == "none":
			case len(r.Overlaps) != 1:
				t.Fatalf("%d over-admissions, want 1", len(r.Overlaps))
			case r.Overlaps[0].Reason != tc.want:
				t.Fatalf("reason %q, want %q", r.Overlaps[0].Reason, tc.want)
			case (tc.want == "") != (r.Unexplained == 1) || (tc.want == "") == r.Safe():
				t.Fatalf("unexplained %d, safe %v", r.Unexplained, r.Safe())
			}
		})
	}
}
