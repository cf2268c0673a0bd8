package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// outage makes the first n attempts of m fail as unreachable.
func outage(m *memLocker, n int64) {
	var seen atomic.Int64
	m.acquire = func(context.Context) error {
		if seen.Add(1) <= n {
			return unavailable("n1")
		}
		return nil
	}
}

// A waiting Acquire rides out a short outage; Do (which waits the same
// way) too. A single try reports it at once.
func TestAcquireWaitsThroughOutage(t *testing.T) {
	m := newMem()
	outage(m, 3)
	lock, err := dlock.Acquire(context.Background(), m, "k", time.Minute, dlock.WithRetryDelay(time.Millisecond))
	if err != nil {
		t.Fatalf("Acquire through an outage of 3 attempts: %v", err)
	}
	lock.Release(context.Background())

	outage(m, 3)
	ran := false
	if err := dlock.Do(context.Background(), m, "k", time.Minute, func(context.Context) error { ran = true; return nil },
		dlock.WithRetryDelay(time.Millisecond)); err != nil || !ran {
		t.Fatalf("Do through an outage of 3 attempts: ran %v, %v", ran, err)
	}

	outage(m, 1)
	m.attempts.Store(0)
	_, err = dlock.Acquire(context.Background(), m, "k", time.Minute, dlock.WithRetryCount(0))
	lockcheck.WantError(t, err, dlock.ErrUnavailable)
	if n := m.attempts.Load(); n != 1 {
		t.Fatalf("a single try made %d attempts", n)
	}
}

// Unreachable attempts back off: a wait of 500ms through a lasting outage
// with a 1ms retry delay makes a few attempts, not hundreds (doubling from
// 1ms, half of it random: about 10).
func TestAcquireBacksOffWhileUnreachable(t *testing.T) {
	m := newMem()
	outage(m, 1<<30)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := dlock.Acquire(ctx, m, "k", time.Minute, dlock.WithRetryDelay(time.Millisecond), dlock.WithRetryJitter(0))
	lockcheck.WantError(t, err, dlock.ErrUnavailable, context.DeadlineExceeded)
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Node != "n1" {
		t.Fatalf("the last attempt's NodeError is not reachable in %v", err)
	}
	if n := m.attempts.Load(); n < 2 || n > 30 {
		t.Fatalf("%d attempts in 500ms of outage; want a few, backing off from 1ms", n)
	}
}

// A backend's ErrInvalid is never retried: waiting cannot fix the input.
func TestAcquireDoesNotRetryInvalid(t *testing.T) {
	m := newMem()
	_, err := dlock.Acquire(context.Background(), m, "", time.Minute, dlock.WithRetryDelay(time.Millisecond))
	lockcheck.WantError(t, err, dlock.ErrInvalid)
	if n := m.attempts.Load(); n != 1 {
		t.Fatalf("%d attempts with an invalid key, want 1", n)
	}
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		delay    time.Duration
		n        int
		min, max time.Duration
	}{
		{50 * ms, 1, 50 * ms, 50 * ms}, // a blip waits like a busy lock
		{50 * ms, 3, 50 * ms, 50 * ms},
		{50 * ms, 4, 50 * ms, 100 * ms}, // then doubles, half of it random
		{50 * ms, 6, 200 * ms, 400 * ms},
		{50 * ms, 100, 500 * ms, time.Second}, // capped at 1s
		{0, 4, ms, 2 * ms},                    // from at least 1ms
		{0, 1, 0, 0},
		{5 * time.Second, 9, 2500 * ms, 5 * time.Second}, // a longer delay is its own cap
	} {
		for range 20 {
			if d := dlock.Backoff(tc.delay, tc.n); d < tc.min || d > tc.max {
				t.Fatalf("backoff(%v, %d) = %v, want in [%v, %v]", tc.delay, tc.n, d, tc.min, tc.max)
			}
		}
	}
}

// A backend's refusal (ErrMisconfigured) is never retried either, and wins
// over a context that ended during the attempt: the caller must learn that
// the setup is wrong, not that it ran out of time.
func TestAcquireDoesNotRetryMisconfigured(t *testing.T) {
	m := newMem()
	refused := fmt.Errorf("dlock: acquire %q: %w: %w", "k", dlock.ErrMisconfigured,
		&dlock.NodeError{Node: "n1", Err: errors.New("WRONGPASS invalid username-password pair")})
	m.acquire = func(context.Context) error { return refused }
	_, err := dlock.Acquire(context.Background(), m, "k", time.Minute, dlock.WithRetryDelay(time.Millisecond))
	lockcheck.WantError(t, err, dlock.ErrMisconfigured)
	ran := false
	err = dlock.Do(context.Background(), m, "k", time.Minute, func(context.Context) error { ran = true; return nil })
	lockcheck.WantError(t, err, dlock.ErrMisconfigured)
	if n := m.attempts.Load(); n != 2 || ran {
		t.Fatalf("Acquire and Do made %d attempts (fn ran: %v), want 1 each", n, ran)
	}

	ctx, cancel := context.WithCancel(context.Background())
	m.acquire = func(context.Context) error { cancel(); return refused }
	_, err = dlock.Acquire(ctx, m, "k", time.Minute)
	lockcheck.WantError(t, err, dlock.ErrMisconfigured)
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("%q lost the server's reason", err)
	}
}
