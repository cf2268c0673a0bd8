package fence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
)

// FuzzMemory drives a Memory guard with any sequence of operations and
// checks each outcome against the rule, kept here as a model: a request
// with an empty resource, fence 0 or an empty token is invalid; otherwise
// a fence above the highest seen is accepted, an equal one only from the
// token that set it, anything else is stale (a tie when equal). Accepted
// operations raise the highest fence and run their function once;
// refused ones run nothing and change nothing.
//
// Each operation is 4 bytes: the kind (register, read, write, a write
// with a failing apply, a nil function), the resource (3, one of them ""),
// the fence (0-7, so ties and stale fences are common), the token (3, one
// of them "").
func FuzzMemory(f *testing.F) {
	resources := []string{"", "a", "b\x00\n"}
	tokens := []string{"", "t1", "t2"}
	applyErr := errors.New("apply failed")
	f.Fuzz(func(t *testing.T, ops []byte) {
		g := fence.NewMemory()
		type state struct {
			highest uint64
			token   string
		}
		model := map[string]state{}
		for len(ops) >= 4 {
			kind, res, fen, tok := ops[0]%5, resources[int(ops[1])%len(resources)], uint64(ops[2]%8), tokens[int(ops[3])%len(tokens)]
			ops = ops[4:]
			ran := 0
			fn := func() error { ran++; return nil }
			var err error
			switch kind {
			case 0:
				err = g.Register(res, fen, tok)
			case 1:
				err = g.Read(res, fen, tok, fn)
			case 2:
				err = g.Write(res, fen, tok, fn)
			case 3:
				err = g.Write(res, fen, tok, func() error { ran++; return applyErr })
			case 4:
				err = g.Write(res, fen, tok, nil)
			}

			s := model[res]
			switch {
			case res == "" || fen == 0 || tok == "" || kind == 4:
				if !errors.Is(err, dlock.ErrInvalid) || errors.Is(err, fence.ErrStale) || ran != 0 {
					t.Fatalf("op %d on %q fence %d token %q: %v (ran %d), want ErrInvalid", kind, res, fen, tok, err, ran)
				}
			case fen > s.highest || fen == s.highest && tok == s.token:
				want := error(nil)
				if kind == 3 {
					want = applyErr
				}
				if err != want || ran != map[bool]int{true: 0, false: 1}[kind == 0] {
					t.Fatalf("op %d on %q fence %d token %q (highest %d by %q): %v (ran %d), want it accepted", kind, res, fen, tok, s.highest, s.token, err, ran)
				}
				model[res] = state{fen, tok}
			default:
				var se *fence.StaleError
				if !errors.As(err, &se) || se.Fence != fen || se.Highest != s.highest || se.Tie != (fen == s.highest) || ran != 0 {
					t.Fatalf("op %d on %q fence %d token %q (highest %d by %q): %v (ran %d), want stale", kind, res, fen, tok, s.highest, s.token, err, ran)
				}
			}
			if err != nil && err != applyErr && strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error message not one line: %q", err)
			}
			for _, r := range resources {
				if hi, ht := g.Highest(r); hi != model[r].highest || ht != model[r].token {
					t.Fatalf("Highest(%q) = %d, %q; want %d, %q", r, hi, ht, model[r].highest, model[r].token)
				}
			}
		}
	})
}
