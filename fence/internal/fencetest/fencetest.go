// Package fencetest states the fencing-guard contract once, as tests that
// every guard (memory, Redis, PostgreSQL) runs through a small adapter.
package fencetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
)

// Guard is one guarded string value, as the suite sees it. Register, Read
// and Write are the guard's fenced operations; Peek reports the value and
// the highest fence without registering anything (tests only).
type Guard interface {
	Register(fence uint64, token string) error
	Read(fence uint64, token string) (value string, err error)
	Write(fence uint64, token, value string) error
	Peek() (value string, highest uint64)
}

// Factory returns a guard over a fresh, never-touched value.
type Factory func(t *testing.T) Guard

// Step is one request in a rule table.
type Step struct {
	Fence uint64
	Token string
	Want  error // nil (accepted), fence.ErrStale or dlock.ErrInvalid
}

// Rule is the guard rule as tables; the steps of a case run in order
// against a fresh value.
var Rule = []struct {
	Name  string
	Steps []Step
}{
	{"first fence accepted", []Step{{1, "A", nil}}},
	{"greater accepted", []Step{{1, "A", nil}, {2, "B", nil}, {7, "C", nil}}},
	{"lower rejected", []Step{{5, "A", nil}, {4, "B", fence.ErrStale}}},
	{"lower rejected even from the same token", []Step{{5, "A", nil}, {3, "A", fence.ErrStale}}},
	{"equal from the same token accepted", []Step{{3, "A", nil}, {3, "A", nil}, {3, "A", nil}}},
	{"equal from another token rejected", []Step{{3, "A", nil}, {3, "B", fence.ErrStale}}},
	{"tie winner keeps it after the loser tried", []Step{{3, "A", nil}, {3, "B", fence.ErrStale}, {3, "A", nil}}},
	{"greater after a tie accepted", []Step{{3, "A", nil}, {3, "B", fence.ErrStale}, {4, "B", nil}, {3, "A", fence.ErrStale}}},
	{"fence 0 invalid", []Step{{0, "A", dlock.ErrInvalid}}},
	{"fence 0 invalid after others", []Step{{2, "A", nil}, {0, "A", dlock.ErrInvalid}}},
	{"empty token invalid", []Step{{1, "", dlock.ErrInvalid}}},
	{"invalid request does not raise", []Step{{0, "", dlock.ErrInvalid}, {1, "A", nil}}},
	// Fences above 2^53 are not exact as doubles (Lua numbers, JSON).
	// 2^53 and 2^53+1 are the same double.
	{"beyond 2^53", []Step{{1 << 53, "A", nil}, {1<<53 + 1, "B", nil}, {1 << 53, "B", fence.ErrStale}, {1<<53 + 2, "A", nil}}},
	{"max uint64", []Step{{1<<64 - 2, "A", nil}, {1<<64 - 1, "B", nil}, {1<<64 - 2, "A", fence.ErrStale}, {1<<64 - 1, "A", fence.ErrStale}}},
	{"more digits is greater", []Step{{9, "A", nil}, {10, "B", nil}, {9, "A", fence.ErrStale}, {99, "A", nil}, {100, "C", nil}}},
}

// CheckStep fails t unless got is what s wants, and keeps stale and
// invalid apart.
func CheckStep(t *testing.T, i int, s Step, got error) {
	t.Helper()
	switch {
	case s.Want == nil && got != nil:
		t.Fatalf("step %d (fence %d, token %q): got %v, want accepted", i, s.Fence, s.Token, got)
	case s.Want != nil && !errors.Is(got, s.Want):
		t.Fatalf("step %d (fence %d, token %q): got %v, want %v", i, s.Fence, s.Token, got, s.Want)
	case errors.Is(got, fence.ErrStale) && errors.Is(got, dlock.ErrInvalid):
		t.Fatalf("step %d: %v matches both ErrStale and ErrInvalid", i, got)
	}
}

// Run runs the contract as subtests of t.
func Run(t *testing.T, newGuard Factory) {
	ops := []struct {
		name string
		do   func(g Guard, i int, s Step) error
	}{
		{"Write", func(g Guard, i int, s Step) error { return g.Write(s.Fence, s.Token, fmt.Sprint("v", i)) }},
		{"Read", func(g Guard, _ int, s Step) error { _, err := g.Read(s.Fence, s.Token); return err }},
		{"Register", func(g Guard, _ int, s Step) error { return g.Register(s.Fence, s.Token) }},
	}
	for _, op := range ops {
		t.Run("Rule/"+op.name, func(t *testing.T) {
			for _, tc := range Rule {
				t.Run(tc.Name, func(t *testing.T) {
					g := newGuard(t)
					for i, s := range tc.Steps {
						beforeV, beforeH := g.Peek()
						err := op.do(g, i, s)
						CheckStep(t, i, s, err)
						v, h := g.Peek()
						wantV, wantH := beforeV, beforeH
						if err == nil {
							wantH = s.Fence
							if op.name == "Write" {
								wantV = fmt.Sprint("v", i)
							}
						}
						if v != wantV || h != wantH {
							t.Fatalf("step %d (%v): value %q, highest %d; want %q, %d", i, err, v, h, wantV, wantH)
						}
					}
				})
			}
		})
	}
	t.Run("StaleErrorNamesFences", func(t *testing.T) {
		g := newGuard(t)
		if err := g.Write(34, "B", "x"); err != nil {
			t.Fatal(err)
		}
		err := g.Write(33, "A", "y")
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Op != "write" || se.Fence != 33 || se.Highest != 34 || se.Tie {
			t.Fatalf("got %v (%#v), want a write StaleError 33 < 34", err, se)
		}
		if !strings.Contains(err.Error(), "33") || !strings.Contains(err.Error(), "34") {
			t.Fatalf("message %q does not name both fences", err)
		}
		_, err = g.Read(34, "C")
		if !errors.As(err, &se) || !se.Tie || se.Op != "read" {
			t.Fatalf("tie: got %v, want a read StaleError with Tie", err)
		}
	})
	t.Run("Seed", func(t *testing.T) {
		g := newGuard(t)
		if err := g.Write(2, "tokB", "B"); err != nil {
			t.Fatalf("B's write with fence 2: %v", err)
		}
		if err := g.Write(1, "tokA", "A"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("A's late write with fence 1: got %v, want ErrStale", err)
		}
		if v, _ := g.Peek(); v != "B" {
			t.Fatalf("value = %q, want B", v)
		}
	})
	t.Run("RegisterBeforeRead", func(t *testing.T) {
		if lost := LostUpdate(newGuard(t)); lost != "" {
			t.Fatal(lost)
		}
		g := newGuard(t)
		if err := g.Register(2, "tokB"); err != nil {
			t.Fatal(err)
		}
		if err := g.Write(1, "tokA", "A"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("write under fence 1 after fence 2 registered: got %v, want ErrStale", err)
		}
		if err := g.Write(2, "tokB", "B"); err != nil {
			t.Fatalf("B's write after its registration: %v", err)
		}
	})
	t.Run("Tie", func(t *testing.T) {
		if both := DoubleTie(newGuard(t)); both != "" {
			t.Fatal(both)
		}
	})
}

// LostUpdate plays F3b and describes the lost update it finds, or returns
// "". The value is a comma-separated list; each write appends an element to
// what its writer read. A (fence 1) writes, reads again and stalls; its lock
// expires and B (fence 2) reads; A's late write lands; B writes. Every
// acknowledged element must be in the final list (Jepsen's set-full check).
func LostUpdate(g Guard) string {
	var acked []string
	write := func(f uint64, tok, base, elem string) {
		v := elem
		if base != "" {
			v = base + "," + elem
		}
		if g.Write(f, tok, v) == nil {
			acked = append(acked, elem)
		}
	}
	write(1, "tokA", "", "a1")
	aRead, _ := g.Read(1, "tokA") // A reads, then pauses
	bRead, err := g.Read(2, "tokB")
	if err != nil {
		return fmt.Sprintf("B's read with fence 2 refused: %v", err)
	}
	write(1, "tokA", aRead, "a2") // A's late write
	write(2, "tokB", bRead, "b1")
	final, _ := g.Peek()
	for _, e := range acked {
		if !slices.Contains(strings.Split(final, ","), e) {
			return fmt.Sprintf("acknowledged write %q lost: final value %q", e, final)
		}
	}
	if !slices.Contains(acked, "b1") {
		return fmt.Sprintf("B's write refused: final value %q", final)
	}
	return ""
}

// DoubleTie has two holders write with the same fence and describes it if
// both were accepted, or returns "".
func DoubleTie(g Guard) string {
	var accepted []string
	for _, tok := range []string{"A", "B"} {
		if g.Write(3, tok, tok) == nil {
			accepted = append(accepted, tok)
		}
	}
	if len(accepted) != 1 || accepted[0] != "A" {
		return fmt.Sprintf("fence 3 accepted from %v, want only the first holder A", accepted)
	}
	return ""
}
