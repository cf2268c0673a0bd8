package backend

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

type locker struct{}

type option func(*locker) error

// Each shared option and check refuses what it must with an error matching
// dlock.ErrInvalid that names the value, and Apply refuses a nil option.
func TestRefusals(t *testing.T) {
	c := New(time.Hour, true)
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil option", Apply(&locker{}, []option{nil}), "nil option"},
		{"reserved prefix", c.SetPrefix("dlock:x"), `prefix "dlock:x"`},
		{"drift factor", c.SetDriftFactor(1), "drift factor 1"},
		{"nil logger", c.SetLogger(nil), "nil logger"},
		{"nil observer", c.AddObserver(nil), "nil observer"},
		{"fence ttl", c.SetFenceTTL(time.Millisecond, time.Second), "fence ttl 1ms: must be between 1s"},
		{"empty key", c.CheckKey(""), "empty lock key"},
		{"reserved key", c.CheckKey("dlock:fence:{x}"), "reserved"},
		{"ttl in drift", c.CheckTTL(2 * time.Millisecond), "drift margin"},
		{"nil ctx", c.Check(nilCtx, "k", time.Second), "nil context"},
		{"empty token", c.CheckToken(context.Background(), "k", ""), "empty token"},
	} {
		if !errors.Is(tc.err, dlock.ErrInvalid) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %q", tc.name, tc.err, tc.want)
		}
	}
	p := New(0, false) // no reserved namespace (PostgreSQL)
	if err := p.SetPrefix("dlock:"); err != nil {
		t.Errorf("a prefix without a reserved namespace: %v", err)
	}
	if err := p.CheckKey("dlock:x"); err != nil {
		t.Errorf("a key without a reserved namespace: %v", err)
	}
	p.NoDrift = true
	if err := p.CheckTTL(time.Millisecond); err != nil {
		t.Errorf("ttl 1ms without a drift margin: %v", err)
	}
	if err := p.CheckTTL(0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("ttl 0 without a drift margin: %v, want ErrInvalid", err)
	}
}

// CheckInspect reads a pattern as Redis reads a glob, so that one pattern
// lists the same names on every backend, and refuses bad arguments.
func TestCheckInspect(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"", "a/b:c", true},
		{"*", "a/b", true}, // slashes too (path.Match's * stops at them)
		{"insp/*", "insp/a", true},
		{"job-?", "job-7", true},
		{"job-?", "job-17", false},
		{"[ab]*", "bx", true},
		{"[!ab]*", "bx", false},
		{`\*`, "*", true},
		{`\*`, "x", false},
		{"a.b", "axb", false},
	} {
		_, match, _, err := CheckInspect(context.Background(), tc.pattern, 0)
		if err != nil || match.MatchString(tc.name) != tc.want {
			t.Errorf("pattern %q on %q: %v, %v; want %v", tc.pattern, tc.name, match, err, tc.want)
		}
	}
	var nilCtx context.Context
	if _, _, limit, _ := CheckInspect(context.Background(), "*", 0); limit != DefaultInspectLimit {
		t.Errorf("limit 0: %d, want %d", limit, DefaultInspectLimit)
	}
	for _, err := range []error{
		func() error { _, _, _, err := CheckInspect(nilCtx, "*", 0); return err }(),
		func() error { _, _, _, err := CheckInspect(context.Background(), "*", -1); return err }(),
		func() error { _, _, _, err := CheckInspect(context.Background(), "[z-a]", 0); return err }(),
		func() error { _, _, _, err := CheckInspect(context.Background(), "[", 0); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("bad arguments: %v, want ErrInvalid", err)
		}
	}
}
