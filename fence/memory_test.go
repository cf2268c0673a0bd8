package fence_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/internal/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memValue adapts one resource of a Memory guard, holding a string, to
// the shared guard contract.
type memValue struct {
	g     *fence.Memory
	value string // touched only inside the guard's functions
}

func (m *memValue) Register(f uint64, tok string) error { return m.g.Register("r", f, tok) }
func (m *memValue) Read(f uint64, tok string) (v string, err error) {
	err = m.g.Read("r", f, tok, func() error { v = m.value; return nil })
	return v, err
}
func (m *memValue) Write(f uint64, tok, v string) error {
	return m.g.Write("r", f, tok, func() error { m.value = v; return nil })
}
func (m *memValue) Peek() (string, uint64) {
	h, _ := m.g.Highest("r")
	return m.value, h
}

func TestMemoryContract(t *testing.T) {
	fencetest.Run(t, func(t *testing.T) fencetest.Guard { return &memValue{g: fence.NewMemory()} })
}

// A refused operation never runs its function.
func TestMemoryStaleRunsNothing(t *testing.T) {
	g := fence.NewMemory()
	if err := g.Register("r", 5, "B"); err != nil {
		t.Fatal(err)
	}
	ran := false
	run := func() error { ran = true; return nil }
	for _, err := range []error{g.Write("r", 4, "A", run), g.Read("r", 4, "A", run), g.Write("r", 5, "A", run), g.Read("r", 5, "A", run)} {
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("got %v, want ErrStale", err)
		}
	}
	if ran {
		t.Fatal("a refused operation ran its function")
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

// naiveGuard is written here on purpose, as the kind of guard the contract
// must catch: with tieRule false it accepts fence >= highest from anyone;
// with register false its reads do not raise the highest fence.
type naiveGuard struct {
	highest  uint64
	token    string
	value    string
	tieRule  bool
	register bool
}

func (n *naiveGuard) ok(f uint64, tok string) bool {
	return f > n.highest || f == n.highest && (!n.tieRule || tok == n.token)
}
func (n *naiveGuard) Register(f uint64, tok string) error {
	if !n.ok(f, tok) {
		return fence.ErrStale
	}
	n.highest, n.token = f, tok
	return nil
}
func (n *naiveGuard) Read(f uint64, tok string) (string, error) {
	if n.register {
		if err := n.Register(f, tok); err != nil {
			return "", err
		}
	}
	return n.value, nil
}
func (n *naiveGuard) Write(f uint64, tok, v string) error {
	if err := n.Register(f, tok); err != nil {
		return err
	}
	n.value = v
	return nil
}
func (n *naiveGuard) Peek() (string, uint64) { return n.value, n.highest }

// Negative controls: the contract's F3b and tie scenarios catch a guard
// that lacks either rule, so they can fail. A naive guard with both rules
// passes them: the scenarios do not fail for other reasons.
func TestNaiveGuardNegativeControl(t *testing.T) {
	if fencetest.LostUpdate(&naiveGuard{tieRule: true, register: false}) == "" {
		t.Error("a guard whose reads do not register passed the F3b scenario")
	}
	if fencetest.DoubleTie(&naiveGuard{tieRule: false, register: true}) == "" {
		t.Error("a guard with plain >= passed the tie scenario")
	}
	full := func() *naiveGuard { return &naiveGuard{tieRule: true, register: true} }
	if got := fencetest.LostUpdate(full()); got != "" {
		t.Errorf("a guard with both rules failed F3b: %s", got)
	}
	if got := fencetest.DoubleTie(full()); got != "" {
		t.Errorf("a guard with both rules failed the tie scenario: %s", got)
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
