package lockcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// sentinels are dlock's sentinel errors. Every error that dlock or a
// backend returns matches exactly one of them; a wait that ended with its
// context matches the context's error as well.
var sentinels = []error{dlock.ErrNotAcquired, dlock.ErrNotHeld, dlock.ErrLockLost, dlock.ErrUnavailable, dlock.ErrMisconfigured, dlock.ErrInvalid}

// Classify returns the one sentinel err matches. When err breaks the rules
// every dlock error keeps — it matches no sentinel or several, or its
// message carries more than one "dlock: " prefix or a line break — it
// returns instead an error that says how. Callers that map errors to
// something else (the CLI's exit codes) can build their table on it.
func Classify(err error) (sentinel error, breach error) {
	if err == nil {
		return nil, errors.New("no error")
	}
	var matched []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			matched = append(matched, s)
		}
	}
	msg := err.Error()
	switch {
	case len(matched) == 0:
		return nil, fmt.Errorf("%q matches no dlock sentinel", msg)
	case len(matched) > 1:
		return nil, fmt.Errorf("%q matches %d sentinels: %v", msg, len(matched), matched)
	case strings.Count(msg, "dlock: ") > 1:
		return nil, fmt.Errorf("%q has more than one \"dlock: \" prefix", msg)
	case strings.ContainsAny(msg, "\r\n"):
		return nil, fmt.Errorf("%q has a line break", msg)
	}
	return matched[0], nil
}

// WantError fails t unless err's one sentinel (see Classify) is want, and
// err also matches each of also (a context's error, a backend's detail).
func WantError(t testing.TB, err, want error, also ...error) {
	t.Helper()
	got, breach := Classify(err)
	if breach != nil {
		t.Fatalf("want an error matching only %v: %v", want, breach)
	}
	if got != want {
		t.Fatalf("got error %q matching %v, want %v", err, got, want)
	}
	for _, a := range also {
		if !errors.Is(err, a) {
			t.Fatalf("error %q does not match %v", err, a)
		}
	}
}

// WantOneOf is WantError for outcomes where either of two sentinels is
// right (a refused extension is ErrNotHeld or ErrLockLost, depending on
// whether the handle noticed first).
func WantOneOf(t testing.TB, err error, want ...error) {
	t.Helper()
	got, breach := Classify(err)
	if breach != nil {
		t.Fatalf("want an error matching one of %v: %v", want, breach)
	}
	for _, w := range want {
		if got == w {
			return
		}
	}
	t.Fatalf("got error %q matching %v, want one of %v", err, got, want)
}

// WantRefused fails t unless Do on l and key returns at once (within a few
// seconds, without calling its function), with a context that never ends
// by itself, an error whose one sentinel is dlock.ErrMisconfigured and
// whose message has reason in it (the server's own words, such as
// "WRONGPASS"). It is the check for a backend whose setup refuses the
// caller (a wrong password, a missing permission): waiting cannot fix
// that, so it must not wait.
func WantRefused(t *testing.T, l dlock.Locker, key, reason string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := false
	done := make(chan error, 1)
	go func() {
		done <- dlock.Do(ctx, l, key, 10*time.Second, func(context.Context) error { ran = true; return nil })
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(refusalBound):
		cancel()
		t.Fatalf("Do still waiting after %v on a backend that refuses (%s): %v", refusalBound, reason, <-done)
	}
	if ran {
		t.Fatalf("Do ran its function on a backend that refuses (%s)", reason)
	}
	WantError(t, err, dlock.ErrMisconfigured)
	if !strings.Contains(err.Error(), reason) {
		t.Fatalf("error %q does not give the server's reason %q", err, reason)
	}
}

// refusalBound is how soon WantRefused wants Do back: one attempt, with
// the margin of a loaded machine.
const refusalBound = 5 * time.Second
