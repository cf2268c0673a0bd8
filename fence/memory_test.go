package fence_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// step is one request to a guard in a rule table.
type step struct {
	fence uint64
	token string
	want  error // nil, fence.ErrStale or dlock.ErrInvalid
}

// ruleCases are the guard rule as tables: the steps run in order against a
// fresh resource. Package redisfence runs the same table.
var ruleCases = []struct {
	name  string
	steps []step
}{
	{"first fence accepted", []step{{1, "A", nil}}},
	{"greater accepted", []step{{1, "A", nil}, {2, "B", nil}, {7, "C", nil}}},
	{"lower rejected", []step{{5, "A", nil}, {4, "B", fence.ErrStale}}},
	{"lower rejected even from the same token", []step{{5, "A", nil}, {3, "A", fence.ErrStale}}},
	{"equal from the same token accepted", []step{{3, "A", nil}, {3, "A", nil}, {3, "A", nil}}},
	{"equal from another token rejected", []step{{3, "A", nil}, {3, "B", fence.ErrStale}}},
	{"tie winner keeps it after the loser tried", []step{{3, "A", nil}, {3, "B", fence.ErrStale}, {3, "A", nil}}},
	{"greater after a tie accepted", []step{{3, "A", nil}, {3, "B", fence.ErrStale}, {4, "B", nil}, {3, "A", fence.ErrStale}}},
	{"fence 0 invalid", []step{{0, "A", dlock.ErrInvalid}}},
	{"fence 0 invalid after others", []step{{2, "A", nil}, {0, "A", dlock.ErrInvalid}}},
	{"empty token invalid", []step{{1, "", dlock.ErrInvalid}}},
	{"invalid request does not raise", []step{{0, "", dlock.ErrInvalid}, {1, "A", nil}}},
	{"max uint64", []step{{1<<64 - 2, "A", nil}, {1<<64 - 1, "B", nil}, {1<<64 - 2, "A", fence.ErrStale}}},
}

// checkStep compares got with the step's expectation, including that stale
// and invalid errors are kept apart.
func checkStep(t *testing.T, i int, s step, got error) {
	t.Helper()
	switch {
	case s.want == nil && got != nil:
		t.Fatalf("step %d (fence %d, token %q): got %v, want accepted", i, s.fence, s.token, got)
	case s.want != nil && !errors.Is(got, s.want):
		t.Fatalf("step %d (fence %d, token %q): got %v, want %v", i, s.fence, s.token, got, s.want)
	case errors.Is(got, fence.ErrStale) && errors.Is(got, dlock.ErrInvalid):
		t.Fatalf("step %d: %v matches both ErrStale and ErrInvalid", i, got)
	}
}

// TestMemoryRule runs the rule table through each of the guard's three
// operations, and checks that a refused write never ran its function.
func TestMemoryRule(t *testing.T) {
	ops := map[string]func(g *fence.Memory, f uint64, tok string, ran *bool) error{
		"Write": func(g *fence.Memory, f uint64, tok string, ran *bool) error {
			return g.Write("res", f, tok, func() error { *ran = true; return nil })
		},
		"Read": func(g *fence.Memory, f uint64, tok string, ran *bool) error {
			return g.Read("res", f, tok, func() error { *ran = true; return nil })
		},
		"Register": func(g *fence.Memory, f uint64, tok string, ran *bool) error {
			err := g.Register("res", f, tok)
			*ran = err == nil
			return err
		},
	}
	for opName, op := range ops {
		for _, tc := range ruleCases {
			t.Run(opName+"/"+tc.name, func(t *testing.T) {
				g := fence.NewMemory()
				for i, s := range tc.steps {
					ran := false
					err := op(g, s.fence, s.token, &ran)
					checkStep(t, i, s, err)
					if ran != (s.want == nil) {
						t.Fatalf("step %d: function ran = %v, want %v", i, ran, s.want == nil)
					}
				}
			})
		}
	}
}

func TestStaleErrorNamesFences(t *testing.T) {
	g := fence.NewMemory()
	if err := g.Write("acct:7", 34, "B", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := g.Write("acct:7", 33, "A", func() error { return nil })
	var se *fence.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("got %v (%T), want *StaleError", err, err)
	}
	if se.Op != "write" || se.Resource != "acct:7" || se.Fence != 33 || se.Highest != 34 || se.Tie {
		t.Fatalf("got %+v", *se)
	}
	for _, s := range []string{"acct:7", "33", "34"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("message %q does not name %s", err, s)
		}
	}
	err = g.Read("acct:7", 34, "C", func() error { return nil })
	if !errors.As(err, &se) || !se.Tie || se.Op != "read" {
		t.Fatalf("tie: got %v, want a read StaleError with Tie", err)
	}
}

func TestMemoryBadInput(t *testing.T) {
	g := fence.NewMemory()
	ok := func() error { return nil }
	cases := map[string]struct {
		err  error
		name string // what the message must name
	}{
		"empty resource":   {g.Write("", 1, "A", ok), "empty resource"},
		"fence 0":          {g.Write("r", 0, "A", ok), "fence 0"},
		"empty token":      {g.Register("r", 1, ""), "empty holder token"},
		"nil apply":        {g.Write("r", 1, "A", nil), "nil apply"},
		"nil read":         {g.Read("r", 1, "A", nil), "nil read"},
		"zero-value guard": {new(fence.Memory).Write("r", 1, "A", ok), "NewMemory"},
		"nil guard":        {(*fence.Memory)(nil).Register("r", 1, "A"), "NewMemory"},
	}
	for name, c := range cases {
		if !errors.Is(c.err, dlock.ErrInvalid) || !strings.Contains(c.err.Error(), c.name) {
			t.Errorf("%s: got %v, want ErrInvalid naming %q", name, c.err, c.name)
		}
	}
	if f, tok := g.Highest("r"); f != 0 || tok != "" {
		t.Fatalf("rejected input raised the fence to %d/%q", f, tok)
	}
	if f, _ := (*fence.Memory)(nil).Highest("r"); f != 0 {
		t.Fatal("nil guard Highest")
	}
}

// An apply that fails still leaves its fence recorded: the caller is the
// newest holder, and the older one must stay out.
func TestMemoryApplyErrorKeepsFence(t *testing.T) {
	g := fence.NewMemory()
	boom := errors.New("disk full")
	if err := g.Write("r", 2, "B", func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want apply's error", err)
	}
	if f, tok := g.Highest("r"); f != 2 || tok != "B" {
		t.Fatalf("Highest = %d/%q, want 2/B", f, tok)
	}
	if err := g.Write("r", 1, "A", func() error { return nil }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older holder after a failed apply: got %v, want ErrStale", err)
	}
}

// Resources are independent: a high fence on one does not block another.
func TestMemoryResourcesIndependent(t *testing.T) {
	g := fence.NewMemory()
	if err := g.Register("a", 100, "X"); err != nil {
		t.Fatal(err)
	}
	if err := g.Register("b", 1, "Y"); err != nil {
		t.Fatalf("resource b refused fence 1 because of a: %v", err)
	}
	if f, tok := g.Highest("a"); f != 100 || tok != "X" {
		t.Fatalf("a: %d/%q", f, tok)
	}
	if f, _ := g.Highest("never"); f != 0 {
		t.Fatalf("untouched resource has fence %d", f)
	}
}

// The seed's scenario: A gets fence 1 and stalls; B gets 2 and writes; A
// wakes up and writes with 1. The guard refuses A and the value is B's.
func TestMemorySeedScenario(t *testing.T) {
	g := fence.NewMemory()
	value := ""
	write := func(f uint64, tok, v string) error {
		return g.Write("storage", f, tok, func() error { value = v; return nil })
	}
	if err := write(2, "tokB", "B"); err != nil {
		t.Fatalf("B's write with fence 2: %v", err)
	}
	if err := write(1, "tokA", "A"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's late write with fence 1: got %v, want ErrStale", err)
	}
	if value != "B" {
		t.Fatalf("value = %q, want B", value)
	}
}

// guard is what the scenarios below need from a guard: a fenced read and a
// fenced write, each running fn only when accepted.
type guard interface {
	read(f uint64, tok string, fn func()) error
	write(f uint64, tok string, fn func()) error
}

type memGuard struct{ g *fence.Memory }

func (m memGuard) read(f uint64, tok string, fn func()) error {
	return m.g.Read("r", f, tok, func() error { fn(); return nil })
}
func (m memGuard) write(f uint64, tok string, fn func()) error {
	return m.g.Write("r", f, tok, func() error { fn(); return nil })
}

// naiveGuard is written here on purpose, as the kind of guard the scenarios
// must catch: with tie false it accepts fence >= highest from anyone; with
// register false its reads do not raise the highest fence.
type naiveGuard struct {
	highest  uint64
	token    string
	tieRule  bool
	register bool
}

func (n *naiveGuard) ok(f uint64, tok string) bool {
	return f > n.highest || f == n.highest && (!n.tieRule || tok == n.token)
}
func (n *naiveGuard) read(f uint64, tok string, fn func()) error {
	if n.register {
		if !n.ok(f, tok) {
			return fence.ErrStale
		}
		n.highest, n.token = f, tok
	}
	fn()
	return nil
}
func (n *naiveGuard) write(f uint64, tok string, fn func()) error {
	if !n.ok(f, tok) {
		return fence.ErrStale
	}
	n.highest, n.token = f, tok
	fn()
	return nil
}

// lostUpdate plays F3b and returns a description of the lost update it
// finds, or "". The value is a list; each write appends an element to what
// its writer read. A (fence 1) writes, reads again and stalls; B (fence 2)
// reads; A's late write lands; B writes. Every acknowledged element must be
// in the final list (the set-full check).
func lostUpdate(g guard) string {
	var value, aRead, bRead []string
	var acked []string
	write := func(f uint64, tok string, base []string, elem string) {
		if g.write(f, tok, func() { value = append(append([]string(nil), base...), elem) }) == nil {
			acked = append(acked, elem)
		}
	}
	write(1, "tokA", nil, "a1")
	g.read(1, "tokA", func() { aRead = value }) // A reads, then pauses
	g.read(2, "tokB", func() { bRead = value }) // A's lock expired; B reads
	write(1, "tokA", aRead, "a2")               // A's late write
	write(2, "tokB", bRead, "b1")
	for _, e := range acked {
		if !slices.Contains(value, e) {
			return fmt.Sprintf("acknowledged %q lost: final value %v", e, value)
		}
	}
	return ""
}

// doubleTie plays two holders with the same fence and returns which writes
// were accepted if both were, or "".
func doubleTie(g guard) string {
	var writers []string
	for _, tok := range []string{"A", "B"} {
		g.write(3, tok, func() { writers = append(writers, tok) })
	}
	if len(writers) > 1 {
		return fmt.Sprintf("fence 3 accepted from %v", writers)
	}
	return ""
}

// F3b: A's late write lands between B's read and B's write. B's read
// registered fence 2, so A is refused, B's write is accepted, and no
// acknowledged update is lost.
func TestMemoryRegisterBeforeRead(t *testing.T) {
	if lost := lostUpdate(memGuard{fence.NewMemory()}); lost != "" {
		t.Fatal(lost)
	}
	g := fence.NewMemory()
	if err := g.Register("r", 2, "tokB"); err != nil {
		t.Fatal(err)
	}
	if err := g.Write("r", 1, "tokA", func() error { return nil }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("write under fence 1 after fence 2 registered: got %v, want ErrStale", err)
	}
	if err := g.Write("r", 2, "tokB", func() error { return nil }); err != nil {
		t.Fatalf("B's write after its registration: %v", err)
	}
}

// Two holders with the same fence: the first keeps the resource.
func TestMemoryTie(t *testing.T) {
	if both := doubleTie(memGuard{fence.NewMemory()}); both != "" {
		t.Fatal(both)
	}
}

// Negative controls: the same scenarios catch a guard that lacks either
// rule, so the two tests above can fail.
func TestNaiveGuardNegativeControl(t *testing.T) {
	if lostUpdate(&naiveGuard{tieRule: true, register: false}) == "" {
		t.Error("a guard whose reads do not register passed the F3b scenario")
	}
	if doubleTie(&naiveGuard{tieRule: false, register: true}) == "" {
		t.Error("a guard with plain >= passed the tie scenario")
	}
	// With both rules the naive guard passes both: the scenarios are sound.
	if lostUpdate(&naiveGuard{tieRule: true, register: true}) != "" || doubleTie(&naiveGuard{tieRule: true, register: true}) != "" {
		t.Error("a guard with both rules failed a scenario: the scenarios are wrong")
	}
}

// 50 goroutines with random fences, some of them tied, hammer one resource.
// The accepted writes, logged inside apply (so in acceptance order), must
// never go down in fence; every fence is used by one holder only; the final
// value belongs to the largest fence any goroutine presented.
func TestMemoryConcurrent(t *testing.T) {
	const (
		workers = 50
		writes  = 200
	)
	g := fence.NewMemory()
	type rec struct {
		fence uint64
		token string
	}
	var log []rec // appended only inside apply, under the guard
	var value rec
	var maxFence uint64
	fences := make([]uint64, workers)
	for i := range fences {
		fences[i] = 1 + rand.Uint64N(30) // 50 draws from 30 values: ties are certain
		maxFence = max(maxFence, fences[i])
	}
	var stale, other [workers]int
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tok := fmt.Sprintf("w%02d", w)
			f := fences[w]
			for range writes {
				// Each worker alternates between its own fence and a fence
				// it has not been granted yet, as fences grow over time.
				if rand.IntN(8) == 0 {
					f++
				}
				err := g.Write("r", f, tok, func() error {
					log = append(log, rec{f, tok})
					value = rec{f, tok}
					return nil
				})
				switch {
				case errors.Is(err, fence.ErrStale):
					stale[w]++
				case err != nil:
					other[w]++
				}
			}
			fences[w] = f // the worker's last fence
		}()
	}
	close(start)
	wg.Wait()

	for w := range workers {
		if other[w] != 0 {
			t.Fatalf("worker %d got %d errors other than ErrStale", w, other[w])
		}
		maxFence = max(maxFence, fences[w])
	}
	if len(log) == 0 {
		t.Fatal("no write accepted")
	}
	owner := map[uint64]string{}
	for i, r := range log {
		if i > 0 && r.fence < log[i-1].fence {
			t.Fatalf("write %d accepted fence %d after fence %d", i, r.fence, log[i-1].fence)
		}
		if o, ok := owner[r.fence]; ok && o != r.token {
			t.Fatalf("fence %d accepted from %s and from %s", r.fence, o, r.token)
		}
		owner[r.fence] = r.token
	}
	if value.fence != maxFence {
		t.Fatalf("final value from fence %d, want the largest fence %d", value.fence, maxFence)
	}
	if f, tok := g.Highest("r"); f != maxFence || tok != value.token {
		t.Fatalf("Highest = %d/%s, want %d/%s", f, tok, maxFence, value.token)
	}
	totalStale := 0
	for _, n := range stale {
		totalStale += n
	}
	if len(log)+totalStale != workers*writes {
		t.Fatalf("%d accepted + %d stale != %d writes", len(log), totalStale, workers*writes)
	}
	t.Logf("%d accepted, %d stale, max fence %d", len(log), totalStale, maxFence)
}
