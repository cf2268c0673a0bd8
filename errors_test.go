package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// Every error path of the root package matches exactly one sentinel (and,
// for a wait that ended with its context, the context's error), with one
// "dlock: " prefix at most and no line break (lockcheck.Classify). The
// backends run the same checks on their own paths in locktest.Run.
func TestErrorsMatchOneSentinel(t *testing.T) {
	nop := func(context.Context) error { return nil }
	busy := func() *memLocker {
		m := newMem()
		if _, err := m.TryAcquire(context.Background(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		return m
	}
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	cancelled := func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errors.New("shutting down"))
		return ctx
	}
	down := func() *memLocker { m := newMem(); outage(m, 1<<30); return m }
	fast := []dlock.Option{dlock.WithRetryDelay(time.Millisecond), dlock.WithRetryJitter(time.Millisecond)}
	acquire := func(ctx context.Context, m *memLocker, opts ...dlock.Option) error {
		_, err := dlock.Acquire(ctx, m, "k", time.Minute, append(fast, opts...)...)
		return err
	}
	held := func(m *memLocker) *dlock.Lock { return mustTry(t, m, "k", time.Minute) }
	// lost returns Do's error after its lock was taken away behind it.
	lostDo := func(fnErr func(ctx context.Context) error) error {
		m := newMem()
		return dlock.Do(context.Background(), m, "k", 200*time.Millisecond, func(ctx context.Context) error {
			m.free("k")
			<-ctx.Done()
			return fnErr(ctx)
		})
	}
	sessionGone := fmt.Errorf("%w: the session ended", dlock.ErrLockLost)

	for _, tc := range []struct {
		name string
		err  func() error
		want error
		also []error
	}{
		// Arguments and options.
		{"Acquire nil locker", func() error { _, err := dlock.Acquire(context.Background(), nil, "k", time.Second); return err }, dlock.ErrInvalid, nil},
		{"Acquire nil option", func() error { return acquire(context.Background(), newMem(), nil) }, dlock.ErrInvalid, nil},
		{"Acquire negative retry count", func() error { return acquire(context.Background(), newMem(), dlock.WithRetryCount(-2)) }, dlock.ErrInvalid, nil},
		{"Acquire bad key from backend", func() error { _, err := dlock.Acquire(context.Background(), newMem(), "", time.Second); return err }, dlock.ErrInvalid, nil},
		{"Do nil function", func() error { return dlock.Do(context.Background(), newMem(), "k", time.Second, nil) }, dlock.ErrInvalid, nil},
		{"Do zero ttl", func() error { return dlock.Do(context.Background(), newMem(), "k", 0, nop) }, dlock.ErrInvalid, nil},
		{"Do threshold above ttl", func() error {
			return dlock.Do(context.Background(), newMem(), "k", time.Second, nop, dlock.WithExtendThreshold(time.Second))
		}, dlock.ErrInvalid, nil},
		{"Do zero max hold", func() error {
			return dlock.Do(context.Background(), newMem(), "k", time.Second, nop, dlock.WithMaxHold(0))
		}, dlock.ErrInvalid, nil},
		{"Extend zero ttl", func() error { return held(newMem()).Extend(context.Background(), 0) }, dlock.ErrInvalid, nil},

		// Waiting.
		{"Acquire budget spent, busy", func() error { return acquire(context.Background(), busy(), dlock.WithRetryCount(2)) }, dlock.ErrNotAcquired, nil},
		{"Acquire deadline, busy", func() error { return acquire(short(), busy()) }, dlock.ErrNotAcquired, []error{context.DeadlineExceeded}},
		{"Acquire cancelled with cause, busy", func() error { return acquire(cancelled(), busy()) }, dlock.ErrNotAcquired, []error{context.Canceled}},
		{"Acquire budget spent, unreachable", func() error { return acquire(context.Background(), down(), dlock.WithRetryCount(2)) }, dlock.ErrUnavailable, nil},
		{"Acquire deadline, unreachable", func() error { return acquire(short(), down()) }, dlock.ErrUnavailable, []error{context.DeadlineExceeded}},
		{"Do deadline, busy", func() error { return dlock.Do(short(), busy(), "k", time.Minute, nop, fast...) }, dlock.ErrNotAcquired, []error{context.DeadlineExceeded}},
		{"Do deadline, unreachable", func() error { return dlock.Do(short(), down(), "k", time.Minute, nop, fast...) }, dlock.ErrUnavailable, []error{context.DeadlineExceeded}},

		// The handle.
		{"Extend after Release", func() error {
			l := held(newMem())
			l.Release(context.Background())
			return l.Extend(context.Background(), time.Second)
		}, dlock.ErrNotHeld, nil},
		{"Release twice", func() error {
			l := held(newMem())
			l.Release(context.Background())
			return l.Release(context.Background())
		}, dlock.ErrNotHeld, nil},
		{"Extend refused", func() error {
			m := newMem()
			l := held(m)
			m.free("k")
			return l.Extend(context.Background(), time.Second)
		}, dlock.ErrNotHeld, nil},
		{"Extend after validity", func() error {
			l := mustTry(t, newMem(), "k", 10*time.Millisecond)
			time.Sleep(20 * time.Millisecond)
			return l.Extend(context.Background(), time.Second)
		}, dlock.ErrLockLost, nil},
		{"Extend unreachable", func() error {
			m := newMem()
			m.extend = func(context.Context, time.Duration) error { return unavailable("n1") }
			return held(m).Extend(context.Background(), time.Second)
		}, dlock.ErrUnavailable, nil},
		{"Extend with backend error of no sentinel", func() error {
			m := newMem()
			m.extend = func(context.Context, time.Duration) error { return errors.New("EOF") }
			return held(m).Extend(context.Background(), time.Second)
		}, dlock.ErrUnavailable, nil},
		{"Release cancelled", func() error {
			m := newMem()
			m.release = func(ctx context.Context) error { return ctx.Err() }
			return held(m).Release(cancelled())
		}, dlock.ErrUnavailable, []error{context.Canceled}},
		{"Extend session gone", func() error {
			m := newMem()
			m.extend = func(context.Context, time.Duration) error { return sessionGone }
			return held(m).Extend(context.Background(), time.Second)
		}, dlock.ErrLockLost, nil},
		{"Release session gone", func() error {
			m := newMem()
			m.release = func(context.Context) error { return sessionGone }
			return held(m).Release(context.Background())
		}, dlock.ErrLockLost, nil},

		// Do's losses.
		{"Do extension refused, fn returns nil", func() error { return lostDo(func(context.Context) error { return nil }) }, dlock.ErrLockLost, nil},
		{"Do extension refused, fn returns ctx.Err", func() error { return lostDo(func(ctx context.Context) error { return ctx.Err() }) }, dlock.ErrLockLost, []error{context.Canceled}},
		{"Do extension refused, fn returns the cause", func() error { return lostDo(context.Cause) }, dlock.ErrLockLost, nil},
		{"Do extension hangs past validity", func() error {
			m := newMem()
			m.extend = func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return unavailable("n1") }
			return dlock.Do(context.Background(), m, "k", 200*time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return nil })
		}, dlock.ErrLockLost, nil},
		{"Do session gone", func() error {
			m := newMem()
			m.extend = func(context.Context, time.Duration) error { return sessionGone }
			return dlock.Do(context.Background(), m, "k", time.Second, func(ctx context.Context) error { <-ctx.Done(); return nil },
				dlock.WithExtendThreshold(900*time.Millisecond)) // extend after 100ms, long before the validity ends
		}, dlock.ErrLockLost, []error{sessionGone}},
		{"Do hold limit", func() error {
			return dlock.Do(context.Background(), newMem(), "k", 200*time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return nil },
				dlock.WithMaxHold(250*time.Millisecond))
		}, dlock.ErrLockLost, nil},
		{"Do lost, release unreachable", func() error {
			m := newMem()
			m.release = func(context.Context) error { return unavailable("n1") }
			return dlock.Do(context.Background(), m, "k", 200*time.Millisecond, func(ctx context.Context) error {
				m.free("k")
				<-ctx.Done()
				return nil
			})
		}, dlock.ErrLockLost, nil},
		{"Do release unreachable", func() error {
			m := newMem()
			m.release = func(context.Context) error { return unavailable("n1") }
			return dlock.Do(context.Background(), m, "k", time.Minute, nop)
		}, dlock.ErrUnavailable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lockcheck.WantError(t, tc.err(), tc.want, tc.also...)
		})
	}
}
