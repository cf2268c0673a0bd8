package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/redlock"
)

func TestElection(t *testing.T) {
	raw := clients(t, shared)
	locktest.RunElection(t, func(t *testing.T) dlock.Locker { return newLocker(t, shared) },
		locktest.WithLapse(func(t *testing.T, key string) {
			for _, c := range raw {
				if err := c.Del(context.Background(), key).Err(); err != nil {
					t.Fatalf("DEL %s: %v", key, err)
				}
			}
		}))
}

// The leader is what a majority of the nodes report: a key on a minority
// is nobody's lock, three nodes holding one token are a leader (unnamed,
// with no fence: nothing published one), and a split with no majority
// either way is an error, not a leader.
func TestLeaderIsWhatAMajoritySays(t *testing.T) {
	ctx := testCtx(t)
	raw := clients(t, shared)
	l := newLocker(t, shared)
	set := func(name string, tokens ...string) {
		for i, tok := range tokens {
			if tok != "" {
				if err := raw[i].Set(ctx, name, tok, 10*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, tc := range []struct {
		name   string
		tokens []string
		want   dlock.Term
		split  bool
	}{
		{"minority", []string{"a", "a", "", "", ""}, dlock.Term{}, false},
		{"majority", []string{"a", "b", "a", "", "a"}, dlock.Term{Led: true}, false},
		{"split", []string{"a", "a", "b", "b", ""}, dlock.Term{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := lockcheck.Key(t)
			set(name, tc.tokens...)
			got, err := dlock.Leader(ctx, l, name)
			var qe *redlock.QuorumError
			switch {
			case tc.split && (!errors.Is(err, dlock.ErrUnavailable) || !errors.As(err, &qe)):
				t.Fatalf("Leader: %+v, %v; want a *QuorumError matching ErrUnavailable", got, err)
			case !tc.split && err != nil:
				t.Fatalf("Leader: %v", err)
			case got.Led != tc.want.Led || got.Leader != "" || got.Fence != 0:
				t.Fatalf("Leader: %+v, want %+v", got, tc.want)
			}
			if tc.split {
				t.Logf("split: %v", err)
			}
		})
	}
}

// A leader's term on Redlock is its lock's fence, the largest draw of the
// majority that granted it, which no single node's counter need show:
// Leader reads it from the record the grant published, on any node.
func TestLeaderReadsTheGrantsFence(t *testing.T) {
	ctx := testCtx(t)
	l, other := newLocker(t, shared), newLocker(t, shared)
	name := lockcheck.Key(t)
	err := dlock.Lead(ctx, l, name, 10*time.Second, func(ctx context.Context) error {
		term, _ := dlock.TermFromContext(ctx)
		got, err := dlock.Leader(ctx, other, name)
		if err != nil || got.Leader != "replica-3" || got.Fence != term.Fence || got.Since.IsZero() {
			t.Errorf("in term %d, Leader reads %+v, %v", term.Fence, got, err)
		}
		return nil
	}, dlock.WithIdentity("replica-3"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dlock.Leader(ctx, other, name); err != nil || got.Led {
		t.Fatalf("after the resignation: %+v, %v", got, err)
	}
}
