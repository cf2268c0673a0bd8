package torture

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Section is one critical section as the events tell it.
type Section struct {
	W      int
	Key    string
	Tok    string
	Fence  uint64
	Grant  int64 // when the function started (the lock was held)
	Exit   int64 // when it recorded its exit; 0 if it never did
	In     int64 // oracle sequence number of the entry
	Out    int64 // of the exit; math.MaxInt64 if it never exited
	Valid  int64 // the validity deadline when it exited (wall clock)
	Lost   int64 // when its context ended, 0 if it had not
	Cause  string
	Held   bool
	Paused bool  // a pause of its worker overlapped it
	Killed int64 // when its worker was killed (FaultKill) inside it; 0 if not
}

// believed returns when the holder stopped believing it held the lock:
// its validity deadline, or when it was told of the loss if earlier.
func (s *Section) believed() int64 {
	end := s.Valid
	if s.Cause == "lost" && s.Lost > 0 && s.Lost < end {
		end = s.Lost
	}
	return end
}

// Op is one fenced operation on the register.
type Op struct {
	W      int
	Key    string
	Write  bool
	Fence  uint64
	Tok    string
	Val    string
	Out    string
	Call   int64
	Return int64
}

// Overlap is a worker entering the critical section while another was
// still inside, by the oracle's sequence.
type Overlap struct {
	Inside, Entered *Section
	// Reason says which injected fault explains it; "" when none does.
	Reason string
}

// Reasons an overlap is explained by.
const (
	reasonPause  = "holder paused beyond its TTL"
	reasonServer = "server fault took its lock"
	reasonLease  = "lease lapsed, network fault"
	reasonCut    = "cut ended its PG session"
)

// Report is the checker's verdict on a run.
type Report struct {
	Config     string
	Seed       int64
	Control    string
	ControlOff bool
	Limit      int // a semaphore's; 0 for locks
	TTL        time.Duration
	Start, End int64
	Faults     []Fault
	Sections   []*Section
	Ops        []Op

	Completed int // sections that ran to their exit
	Overlaps  []Overlap
	// Explained counts overlaps by reason; Unexplained the rest.
	Explained   map[string]int
	Unexplained int

	// The fenced register.
	BelowAccepted int // accepted writes whose fence is below one accepted before
	SameFence     int // fences accepted from two different tokens
	Rejected      int // stale operations refused (Ties of them by the tie rule)
	Ties          int
	Unknown       int    // operations without an answer
	Linearizable  string // porcupine's result: "ok", "illegal" or "unknown"

	Lost       int // sections whose context was cancelled with ErrLockLost
	Paused     int // sections of a paused holder
	PausedTold int // of those, cancelled with ErrLockLost
	NotTold    int // validity ran out, yet the context was not cancelled

	Errors map[string]int // Do's errors, by the sentinels they match

	LongestGap time.Duration // nobody held the lock while someone waited, beyond faults
	GapAt      int64

	LocksLeft    int
	OracleErrors int
	Problems     []string // anything that makes the run's record incomplete

	Election *ElectionReport // the election scenario's checks; nil otherwise
}

// Safe reports whether the run found no violation: every must-be-zero
// count is zero and every overlap is explained by a fault.
func (r *Report) Safe() bool {
	return r.Unexplained == 0 && r.BelowAccepted == 0 && r.SameFence == 0 && r.Linearizable == "ok" &&
		r.NotTold == 0 && r.LocksLeft == 0 && r.OracleErrors == 0 && len(r.Problems) == 0 && r.Election.safe()
}

func check(cfg *Config, events []Event, faults []Fault, start, end int64) *Report {
	r := &Report{Config: cfg.String(), Seed: cfg.Seed, Control: cfg.Control, ControlOff: cfg.ControlOff, Limit: cfg.Limit, TTL: cfg.TTL, Start: start, End: end,
		Faults: faults, Explained: map[string]int{}, Errors: map[string]int{}}
	ttl := int64(cfg.TTL)

	var cur *Section
	waits := map[string][][2]int64{} // per key: [wait start, wait end] of each Do
	waitStart := map[int]int64{}
	// pending is an operation called and not (yet) answered: the next
	// event of its worker answers it, unless the worker was killed.
	var pending *Op
	unanswered := func() {
		if pending != nil {
			pending.Out = outUnknown // it may have landed
			r.Ops = append(r.Ops, *pending)
			pending = nil
		}
	}
	for _, e := range events {
		if cur != nil && cur.W != e.W {
			cur = nil // the events of the next worker: the last section never exited
		}
		if e.Ev != evRead && e.Ev != evWrite {
			unanswered()
		}
		switch e.Ev {
		case evCall:
			pending = &Op{W: e.W, Key: e.Key, Write: e.Op == evWrite, Fence: e.Fence, Tok: e.Tok, Val: e.Val, Call: e.T}
		case evWait:
			waitStart[e.W] = e.T
		case evEnter:
			cur = &Section{W: e.W, Key: e.Key, Tok: e.Tok, Fence: e.Fence, Grant: e.T, In: e.Seq, Out: math.MaxInt64, Valid: e.Valid}
			r.Sections = append(r.Sections, cur)
			if e.Msg != "" || e.Seq == 0 {
				r.OracleErrors++
			}
			if ws, ok := waitStart[e.W]; ok {
				waits[e.Key] = append(waits[e.Key], [2]int64{ws, e.T})
				delete(waitStart, e.W)
			}
		case evRead, evWrite:
			pending = nil
			r.Ops = append(r.Ops, Op{W: e.W, Key: e.Key, Write: e.Ev == evWrite, Fence: e.Fence, Tok: e.Tok, Val: e.Val, Out: e.Out, Call: e.T0, Return: e.T})
		case evExit:
			if cur == nil || cur.W != e.W || cur.Tok != e.Tok {
				r.Problems = append(r.Problems, fmt.Sprintf("worker %d: an exit without its entry", e.W))
				continue
			}
			cur.Exit, cur.Out, cur.Valid, cur.Lost, cur.Cause, cur.Held = e.T, e.Seq, e.Valid, e.Lost, e.Cause, e.Held
			if e.Msg != "" || e.Seq == 0 {
				r.OracleErrors++
				cur.Out = math.MaxInt64
			}
			r.Completed++
			cur = nil
		case evDone:
			if ws, ok := waitStart[e.W]; ok {
				waits[e.Key] = append(waits[e.Key], [2]int64{ws, e.T})
				delete(waitStart, e.W)
			}
			if e.Err != "" && e.Err != "stop" {
				for _, s := range strings.Split(e.Err, "+") {
					r.Errors[s]++
				}
			}
		}
	}
	unanswered()

	for _, s := range r.Sections {
		end := s.Exit
		if end == 0 {
			end = r.End
		}
		for _, f := range faults {
			if f.Kind == FaultPause && f.Worker == s.W && f.Start < end && f.End > s.Grant {
				s.Paused = true
			}
			if f.Kind == FaultKill && f.Worker == s.W && s.Exit == 0 && f.Start >= s.Grant && s.Killed == 0 {
				s.Killed = f.Start
			}
		}
		if s.Paused {
			r.Paused++
			if s.Cause == "lost" {
				r.PausedTold++
			}
		}
		if s.Cause == "lost" {
			r.Lost++
		}
		if s.Exit != 0 && !s.Held && s.Cause == "" {
			r.NotTold++
		}
	}

	if cfg.Limit > 0 {
		r.findOverAdmissions(cfg.Backend, cfg.Limit, faults)
	} else {
		r.findOverlaps(cfg.Backend, faults)
	}
	r.checkRegister()
	r.LongestGap, r.GapAt = longestGap(r.Sections, waits, faults, ttl, max(cfg.Limit, 1), start, end)
	if cfg.Election {
		r.Election = checkElection(cfg, r, events)
	}
	return r
}

// findOverAdmissions is findOverlaps for semaphores of limit permits: it
// finds, key by key, every section entered while limit or more were
// inside, and counts it unexplained unless the faults explain enough of
// those inside (each as explain would a lock's overlap: a holder paused
// past its validity, a server fault) to leave fewer than limit.
func (r *Report) findOverAdmissions(backend string, limit int, faults []Fault) {
	for _, ss := range r.byEntry() {
		var inside []*Section
		for _, b := range ss {
			inside = slices.DeleteFunc(inside, func(a *Section) bool { return !stillInside(a, b) })
			if len(inside) >= limit {
				o := Overlap{Entered: b}
				unexplained := 0
				for _, a := range inside {
					if reason := explain(backend, a, b, faults); reason == "" {
						unexplained++
						o.Inside = a
					} else if o.Reason == "" {
						o.Reason = reason
					}
				}
				if unexplained >= limit {
					o.Reason = ""
				} else if o.Inside == nil {
					o.Inside = inside[0]
				}
				r.record(o)
			}
			inside = append(inside, b)
		}
	}
}

// findOverlaps finds, key by key, every section entered while another was
// inside (by the oracle's sequence, which orders entries and exits
// exactly), and classifies each.
func (r *Report) findOverlaps(backend string, faults []Fault) {
	for _, ss := range r.byEntry() {
		var inside []*Section
		for _, b := range ss {
			inside = slices.DeleteFunc(inside, func(a *Section) bool { return !stillInside(a, b) })
			for _, a := range inside {
				r.record(Overlap{Inside: a, Entered: b, Reason: explain(backend, a, b, faults)})
			}
			inside = append(inside, b)
		}
	}
}

// byEntry returns the sections that entered, grouped by key (keys in
// order), each group in the order of entry.
func (r *Report) byEntry() [][]*Section {
	byKey := map[string][]*Section{}
	for _, s := range r.Sections {
		if s.In != 0 {
			byKey[s.Key] = append(byKey[s.Key], s)
		}
	}
	var out [][]*Section
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		ss := byKey[key]
		slices.SortFunc(ss, func(a, b *Section) int { return cmp.Compare(a.In, b.In) })
		out = append(out, ss)
	}
	return out
}

// stillInside reports whether a was inside when b entered. A killed
// holder is gone: nobody granted after its death overlaps it.
func stillInside(a, b *Section) bool {
	return a.Out > b.In && (a.Killed == 0 || b.Grant <= a.Killed)
}

// record adds an overlap to the report and counts it.
func (r *Report) record(o Overlap) {
	r.Overlaps = append(r.Overlaps, o)
	if o.Reason == "" {
		r.Unexplained++
	} else {
		r.Explained[o.Reason]++
	}
}

// explain says which injected fault explains that b entered while a was
// inside, or "" if none does.
//
// When b got the lock after a's belief ended (its validity ran out, or it
// was told of the loss), the lock was exclusive and a overran its lease:
// that needs a pause of a's worker, a network fault on its links, or a
// server fault, during a's section. When b got it while a still believed
// it held the lock, two holders were granted the lock at once: only a
// server fault during a's section (a restart that forgot a's key, a lost
// majority, a terminated backend) can explain that, or for PostgreSQL a cut
// of a's connection: its session, and the lock with it, ends at once, and
// a learns of it at its next check.
func explain(backend string, a, b *Section, faults []Fault) string {
	during := func(f Fault, from, to int64) bool { return f.Start <= to && f.End >= from }
	for _, f := range faults {
		if f.server() && during(f, a.Grant, b.Grant) {
			return reasonServer
		}
		if backend == Postgres && f.Kind == FaultCut && f.Worker == a.W && during(f, a.Grant, b.Grant) {
			return reasonCut
		}
	}
	if b.Grant <= a.believed() {
		return ""
	}
	for _, f := range faults {
		if f.Kind == FaultPause && f.Worker == a.W && during(f, a.Grant, b.Grant) {
			return reasonPause
		}
	}
	for _, f := range faults {
		if f.network() && f.Worker == a.W && during(f, a.Grant, a.believed()) {
			return reasonLease
		}
	}
	return ""
}

// checkRegister checks the fenced register's history: no accepted write
// below a fence accepted before it, no fence accepted from two tokens, and
// the whole history linearizable for a register guarded by the tie rule.
func (r *Report) checkRegister() {
	byKey := map[string][]Op{}
	for _, op := range r.Ops {
		byKey[op.Key] = append(byKey[op.Key], op)
		switch op.Out {
		case outStale:
			r.Rejected++
		case outTie:
			r.Rejected++
			r.Ties++
		case outUnknown:
			r.Unknown++
		}
	}
	for _, ops := range byKey {
		var accepted []Op
		for _, op := range ops {
			if op.Out == outOK {
				accepted = append(accepted, op)
			}
		}
		// Below: an accepted write whose fence is lower than that of an
		// operation accepted (returned) before the write was called.
		byReturn := slices.Clone(accepted)
		slices.SortFunc(byReturn, func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
		byCall := slices.Clone(accepted)
		slices.SortFunc(byCall, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
		var highest uint64
		i := 0
		for _, op := range byCall {
			for i < len(byReturn) && byReturn[i].Return < op.Call {
				highest = max(highest, byReturn[i].Fence)
				i++
			}
			if op.Write && op.Fence < highest {
				r.BelowAccepted++
			}
		}
		tokens := map[uint64]map[string]bool{}
		for _, op := range accepted {
			if tokens[op.Fence] == nil {
				tokens[op.Fence] = map[string]bool{}
			}
			tokens[op.Fence][op.Tok] = true
		}
		for _, t := range tokens {
			if len(t) > 1 {
				r.SameFence++
			}
		}
	}
	r.Linearizable = linearizable(r.Ops, r.End)
}

// The register as porcupine sees it.
type (
	regInput struct {
		Key   string
		Write bool
		Fence uint64
		Tok   string
		Val   string
	}
	regOutput struct{ Out, Val string }
	regState  struct {
		Fence uint64
		Tok   string
		Val   string
	}
)

// registerModel is a register behind a guard with the tie rule: an
// operation is accepted iff its fence is above the highest seen, or equal
// to it and from the token that set it; a read returns the last accepted
// write. An operation without an answer may have happened or not.
var registerModel = (&porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		parts := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(regInput).Key
			parts[k] = append(parts[k], op)
		}
		return slices.Collect(maps.Values(parts))
	},
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		accepts := in.Fence > s.Fence || (in.Fence == s.Fence && in.Tok == s.Tok)
		next := regState{Fence: in.Fence, Tok: in.Tok, Val: s.Val}
		if in.Write {
			next.Val = in.Val
		}
		switch out.Out {
		case outUnknown:
			if accepts {
				return []any{s, next}
			}
			return []any{s}
		case outOK:
			if !accepts || (!in.Write && out.Val != s.Val) {
				return nil
			}
			return []any{next}
		}
		if accepts {
			return nil // refused, though the rule accepts it
		}
		return []any{s}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		op := "read"
		if in.Write {
			op = "write " + in.Val
		}
		return fmt.Sprintf("%s fence %d -> %s %s", op, in.Fence, out.Out, out.Val)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("fence %d value %q", s.Fence, s.Val)
	},
}).ToModel()

// linearizable checks the register's history with porcupine.
func linearizable(ops []Op, end int64) string {
	h := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		if op.Out == outUnknown {
			ret = end + 1 // it may land any time until the end
		}
		h = append(h, porcupine.Operation{ClientId: op.W, Call: op.Call, Return: ret,
			Input:  regInput{Key: op.Key, Write: op.Write, Fence: op.Fence, Tok: op.Tok, Val: op.Val},
			Output: regOutput{Out: op.Out, Val: op.Val}})
	}
	switch porcupine.CheckOperationsTimeout(registerModel, h, time.Minute) {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "illegal"
	}
	return "unknown"
}

// longestGap returns the longest time, beyond what a fault explains, that
// a key was held by fewer than need (1 for a lock, a semaphore's limit)
// while somebody waited for it. A fault explains
// a gap from its start until two TTLs after its end (the lock of a holder
// cut off or restarted away is unusable until its TTL runs out), a kill
// until one TTL after it (the dead holder's lease runs out by then). The
// time before the run's first grant does not count.
func longestGap(sections []*Section, waits map[string][][2]int64, faults []Fault, ttl int64, need int, start, end int64) (time.Duration, int64) {
	type edge struct {
		t             int64
		held, waiting int
	}
	// Only the run itself counts, from its first grant: before it the
	// workers are still connecting to the servers.
	first := end
	for _, s := range sections {
		first = min(first, s.Grant)
	}
	excl := [][2]int64{{math.MinInt64, max(start, first)}, {end, math.MaxInt64}}
	for _, f := range faults {
		switch f.Kind {
		case FaultFastClock, "setup":
		case FaultKill: // the dead holder's lease runs out within a TTL
			excl = append(excl, [2]int64{f.Start, f.End + ttl})
		default:
			excl = append(excl, [2]int64{f.Start, f.End + 2*ttl})
		}
	}
	var best time.Duration
	var at int64
	byKey := map[string][]edge{}
	for _, s := range sections {
		if s.Exit != 0 {
			byKey[s.Key] = append(byKey[s.Key], edge{s.Grant, 1, 0}, edge{s.Exit, -1, 0})
		} else if s.Killed != 0 {
			byKey[s.Key] = append(byKey[s.Key], edge{s.Grant, 1, 0}, edge{s.Killed, -1, 0})
		}
	}
	for k, ws := range waits {
		for _, w := range ws {
			byKey[k] = append(byKey[k], edge{w[0], 0, 1}, edge{w[1], 0, -1})
		}
	}
	for _, es := range byKey {
		slices.SortFunc(es, func(a, b edge) int { return cmp.Compare(a.t, b.t) })
		held, waiting := 0, 0
		for i, e := range es {
			held += e.held
			waiting += e.waiting
			if held < need && waiting > 0 && i+1 < len(es) {
				for _, piece := range subtract([2]int64{e.t, es[i+1].t}, excl) {
					if d := time.Duration(piece[1] - piece[0]); d > best {
						best, at = d, piece[0]
					}
				}
			}
		}
	}
	return best, at
}

// subtract returns the parts of iv outside every interval of excl.
func subtract(iv [2]int64, excl [][2]int64) [][2]int64 {
	parts := [][2]int64{iv}
	for _, x := range excl {
		var next [][2]int64
		for _, p := range parts {
			if x[1] <= p[0] || x[0] >= p[1] {
				next = append(next, p)
				continue
			}
			if x[0] > p[0] {
				next = append(next, [2]int64{p[0], x[0]})
			}
			if x[1] < p[1] {
				next = append(next, [2]int64{x[1], p[1]})
			}
		}
		parts = next
	}
	return parts
}

// Print writes the verdict with its counts.
func (r *Report) Print(w interface{ Write([]byte) (int, error) }) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	mark := func(n int) string {
		if n == 0 {
			return "ok"
		}
		return "VIOLATION"
	}
	p("\nVerdict for %s\n", r.Config)
	p("  sections completed                          %6d\n", r.Completed)
	if r.Limit > 0 {
		p("  entries with %3d or more inside (oracle)    %6d\n", r.Limit, len(r.Overlaps))
	} else {
		p("  overlaps seen by the oracle                 %6d\n", len(r.Overlaps))
	}
	for _, reason := range slices.Sorted(maps.Keys(r.Explained)) {
		p("    explained: %-29s %6d\n", reason, r.Explained[reason])
	}
	p("    unexplained                               %6d  %s\n", r.Unexplained, mark(r.Unexplained))
	shown := 0
	for _, o := range r.Overlaps {
		if o.Reason != "" || shown == 5 {
			continue
		}
		shown++
		a, b := o.Inside, o.Entered
		p("      at %v, %s: worker %d entered (seq %d, fence %d) while worker %d was inside (seq %d, fence %d), %s\n",
			time.Duration(b.Grant-r.Start).Round(time.Millisecond), a.Key, b.W, b.In, b.Fence, a.W, a.In, a.Fence, beliefNote(a, b))
	}
	p("  fenced writes accepted below a higher fence %6d  %s\n", r.BelowAccepted, mark(r.BelowAccepted))
	p("  one fence accepted from two tokens          %6d  %s\n", r.SameFence, mark(r.SameFence))
	p("  stale operations rejected by the guard      %6d  (%d by the tie rule)\n", r.Rejected, r.Ties)
	if r.Unknown > 0 {
		p("  guard operations without an answer          %6d\n", r.Unknown)
	}
	lin := "ok"
	if r.Linearizable != "ok" {
		lin = "VIOLATION"
	}
	p("  register history linearizable (porcupine)   %6s  %s\n", r.Linearizable, lin)
	p("  Do contexts cancelled with ErrLockLost      %6d  (%d of %d paused holders)\n", r.Lost, r.PausedTold, r.Paused)
	p("  lapsed leases not signalled to Do's fn      %6d  %s\n", r.NotTold, mark(r.NotTold))
	p("  errors by sentinel                          ")
	if len(r.Errors) == 0 {
		p("  none\n")
	} else {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Errors[k]))
		}
		p("  %s\n", strings.Join(parts, ", "))
	}
	free := "the lock free, no fault  "
	if r.Limit > 0 {
		free = "a permit free, no fault   "
	}
	if r.LongestGap > 0 {
		p("  longest wait with %s %6v  (at %v)\n", free, r.LongestGap.Round(time.Millisecond), time.Duration(r.GapAt-r.Start).Round(time.Millisecond))
	} else {
		p("  longest wait with %s      0\n", free)
	}
	p("  locks left on the servers at the end        %6d  %s\n", r.LocksLeft, mark(r.LocksLeft))
	if r.Election != nil {
		r.Election.print(p, mark)
	}
	if r.OracleErrors > 0 {
		p("  oracle errors (the record is incomplete)    %6d  VIOLATION\n", r.OracleErrors)
	}
	for _, pr := range r.Problems {
		p("  problem: %s\n", pr)
	}
	switch {
	case r.Safe() && r.Control != "" && !r.ControlOff:
		p("SAFE, but this was the negative control %q: the checker missed it\n", r.Control)
	case r.Safe():
		p("SAFE (seed %d)\n", r.Seed)
	case r.Control != "" && !r.ControlOff:
		p("UNSAFE, as the negative control %q must be (seed %d)\n", r.Control, r.Seed)
	default:
		p("UNSAFE (seed %d reproduces the schedule)\n", r.Seed)
	}
}

func beliefNote(a, b *Section) string {
	d := time.Duration(a.believed() - b.Grant)
	if d >= 0 {
		return fmt.Sprintf("%v before the first's validity ended", d.Round(10*time.Microsecond))
	}
	return fmt.Sprintf("%v after the first's validity ended, with no fault on it", (-d).Round(10*time.Microsecond))
}
