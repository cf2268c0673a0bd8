package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestCheck: Check refuses what the conformance suite's BadInput feeds a
// backend, and a TTL that ValidUntil would leave no validity to, with
// ErrInvalid alone; it accepts the shortest TTL that leaves some.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		key  string
		ttl  time.Duration
		ok   bool
	}{
		{"valid", ctx, "k", time.Second, true},
		{"nil context", nil, "k", time.Second, false},
		{"empty key", ctx, "", time.Second, false},
		{"zero ttl", ctx, "k", 0, false},
		{"negative ttl", ctx, "k", -time.Second, false},
		{"sub-millisecond ttl", ctx, "k", time.Microsecond, false},
		{"ttl within the drift margin", ctx, "k", 2 * time.Millisecond, false},
		{"ttl just above the drift margin", ctx, "k", 3 * time.Millisecond, true},
		{"ttl above 30 days", ctx, "k", 30*24*time.Hour + 1, false},
	} {
		err := Check(tc.ctx, tc.key, tc.ttl)
		now := time.Now()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: Check: %v, want nil", tc.name, err)
		case !tc.ok && !errors.Is(err, dlock.ErrInvalid):
			t.Errorf("%s: Check: %v, want ErrInvalid", tc.name, err)
		case tc.ok && !ValidUntil(now, tc.ttl).After(now):
			t.Errorf("%s: Check accepts a ttl that ValidUntil leaves no validity to", tc.name)
		}
	}
}
