package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
)

// FuzzValidation: the input checks (the key and TTL rules, driver.Check, the
// backends' token and drift factor checks, the With* options as Acquire and Do apply
// them) never panic and decide as documented; what they refuse matches
// ErrInvalid alone, in one line. Milliseconds rounds every valid TTL up to
// whole milliseconds, and Drift stays within its bounds.
func FuzzValidation(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, token string, ttl int64, drift float64,
		count int, delay, jitter, threshold, maxHold int64, set uint8) {
		d, start0 := time.Duration(ttl), time.Now()

		err := bridge.CheckKey(key)
		wantInvalidOrNil(t, "CheckKey", err)
		if key == "" && err == nil {
			t.Fatal("CheckKey accepted the empty key")
		}
		if plainName(key) && err != nil {
			t.Fatalf("CheckKey(%q) refused a plain name: %v", key, err)
		}
		var cfg backend.Config
		err = cfg.CheckToken(context.Background(), key, token)
		wantInvalidOrNil(t, "CheckToken", err)
		if (key == "" || token == "") && err == nil {
			t.Fatalf("CheckToken(%q, %q) accepted an empty key or token", key, token)
		}

		err = bridge.CheckTTL(d)
		wantInvalidOrNil(t, "CheckTTL", err)
		validTTL := d >= time.Millisecond && d <= bridge.MaxTTL
		if (err == nil) != validTTL {
			t.Fatalf("CheckTTL(%v) = %v", d, err)
		}
		if validTTL {
			ms := time.Duration(bridge.Milliseconds(d)) * time.Millisecond
			if ms < d || ms-time.Millisecond >= d {
				t.Fatalf("Milliseconds(%v) = %v: not rounded up to whole milliseconds", d, ms)
			}
		}

		err = driver.Check(context.Background(), key, d)
		wantInvalidOrNil(t, "driver.Check", err)
		if (key == "" || !validTTL) && err == nil {
			t.Fatalf("driver.Check(%q, %v) accepted what the rules refuse", key, d)
		}
		if err == nil && !driver.ValidUntil(start0, d).After(start0) {
			t.Fatalf("driver.Check accepted %v, which ValidUntil leaves no validity to", d)
		}

		err = cfg.SetDriftFactor(drift)
		wantInvalidOrNil(t, "SetDriftFactor", err)
		if (err == nil) != (drift >= 0 && drift < 1) {
			t.Fatalf("SetDriftFactor(%v) = %v", drift, err)
		}
		if err == nil && validTTL {
			dr := bridge.Drift(d, drift)
			if dr < 2*time.Millisecond || dr > time.Duration(float64(d)*drift)+2*time.Millisecond {
				t.Fatalf("Drift(%v, %v) = %v", d, drift, dr)
			}
			start := time.Now()
			if until := bridge.ValidUntil(start, d, drift); until.After(start.Add(d)) {
				t.Fatalf("ValidUntil(%v, %v) is past the TTL", d, drift)
			}
		}

		// The options, as Acquire and Do apply them; set says which are
		// given (bit 6: a nil option too).
		var opts []dlock.Option
		optionsOK := true
		add := func(bit uint, o dlock.Option, ok bool) {
			if set&(1<<bit) != 0 {
				opts = append(opts, o)
				optionsOK = optionsOK && ok
			}
		}
		add(0, dlock.WithRetryCount(count), count >= dlock.RetryForever)
		add(1, dlock.WithRetryDelay(time.Duration(delay)), delay >= 0)
		add(2, dlock.WithRetryJitter(time.Duration(jitter)), jitter >= 0)
		add(3, dlock.WithExtendThreshold(time.Duration(threshold)), threshold > 0)
		add(4, dlock.WithMaxHold(time.Duration(maxHold)), maxHold > 0)
		add(6, nil, false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		lock, err := dlock.Acquire(ctx, grantAll{}, "k", d, opts...)
		wantInvalidOrNil(t, "Acquire", err)
		if (err == nil) != (optionsOK && validTTL) {
			t.Fatalf("Acquire with ttl %v and options %08b (valid %v): %v", d, set, optionsOK, err)
		}
		if lock != nil {
			lock.Release(ctx)
		}

		doOK := optionsOK && validTTL && (set&(1<<3) == 0 || time.Duration(threshold) < d)
		err = dlock.Do(ctx, grantAll{}, "k", d, func(context.Context) error { return nil }, opts...)
		switch {
		case !doOK:
			wantInvalidOrNil(t, "Do", err)
			if err == nil {
				t.Fatalf("Do with ttl %v and options %08b accepted them", d, set)
			}
		case err != nil && !errors.Is(err, dlock.ErrLockLost): // a 1ms lease may run out
			t.Fatalf("Do with ttl %v and valid options %08b: %v", d, set, err)
		}
	})
}

// wantInvalidOrNil fails unless err is nil or matches ErrInvalid and no
// other sentinel, with a one-line message.
func wantInvalidOrNil(t *testing.T, op string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []error{dlock.ErrNotAcquired, dlock.ErrNotHeld, dlock.ErrLockLost, dlock.ErrUnavailable} {
		if errors.Is(err, s) {
			t.Fatalf("%s: %q matches %v", op, err, s)
		}
	}
	if !errors.Is(err, dlock.ErrInvalid) || strings.ContainsAny(err.Error(), "\r\n") {
		t.Fatalf("%s: %q: want ErrInvalid, in one line", op, err)
	}
}

// plainName reports whether key is an ordinary lock name that no check may
// refuse: letters, digits and a few separators, outside dlock's own
// namespace.
func plainName(key string) bool {
	if key == "" || len(key) > 200 || strings.HasPrefix(strings.ToLower(key), "dlock") {
		return false
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":-_/.", c)) {
			return false
		}
	}
	return true
}

// grantAll is a Locker that grants every valid request at once.
type grantAll struct{}

func (grantAll) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := bridge.CheckKey(key); err != nil {
		return nil, err
	}
	if err := bridge.CheckTTL(ttl); err != nil {
		return nil, err
	}
	return driver.NewLock(key, bridge.NewToken(), 1, time.Now().Add(ttl), nopGrant{}), nil
}

type nopGrant struct{}

func (nopGrant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	return time.Now().Add(ttl), nil
}

func (nopGrant) Release(context.Context) error { return nil }
