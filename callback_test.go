package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// within fails the test if f has not returned after a generous bound: a
// callback that runs under one of the library's locks deadlocks, and the
// test must fail instead of hanging.
func within(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no return after 5s: the observer deadlocked", what)
	}
}

type probeKey struct{}

// An observer that looks into the context of the call it reports, as
// trace.SpanFromContext does, while fn extends or releases its own lock
// with Do's context, whose Value and Err look at the lock.
func TestObserverReadsDoContext(t *testing.T) {
	observe := func(ctx context.Context, e dlock.Event) {
		_ = ctx.Value(probeKey{})
		_ = ctx.Err()
	}
	for _, op := range []string{"extend", "release"} {
		t.Run(op, func(t *testing.T) {
			m := newObserved(observe)
			within(t, "Do", func() error {
				return dlock.Do(context.Background(), m, "k", time.Minute, func(ctx context.Context) error {
					lock := dlock.LockFromContext(ctx)
					if op == "extend" {
						return lock.Extend(ctx, time.Minute)
					}
					return lock.Release(ctx)
				})
			})
		})
	}
}

// An observer may call the lock it reports on: read it, extend it,
// release it.
func TestObserverCallsLock(t *testing.T) {
	var lock atomic.Pointer[dlock.Lock]
	var extended atomic.Int32
	released := make(chan error, 1)
	observe := func(ctx context.Context, e dlock.Event) {
		l := lock.Load()
		if l == nil || e.Kind != dlock.EventExtended {
			return
		}
		_, _ = l.Held(), l.Remaining()
		switch extended.Add(1) {
		case 1:
			if err := l.Extend(ctx, time.Minute); err != nil {
				released <- err
			}
		case 2:
			released <- l.Release(ctx)
		}
	}
	l, err := dlock.Acquire(context.Background(), newObserved(observe), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lock.Store(l)
	within(t, "Extend", func() error { return l.Extend(context.Background(), time.Minute) })
	within(t, "the observer's Release", func() error { return <-released })
	if l.Held() || extended.Load() != 2 {
		t.Fatalf("held %v after %d extensions, want released after 2", l.Held(), extended.Load())
	}
}

// A loss that the backend declares (driver.Lost) reaches the observer
// before Lost returns, outside the lock's mutex: the observer may call the
// lock.
func TestObserverOfDeclaredLoss(t *testing.T) {
	var r recorder
	var lock atomic.Pointer[dlock.Lock]
	held := make(chan bool, 1)
	m := newObserved(func(ctx context.Context, e dlock.Event) {
		r.observe(ctx, e)
		if e.Kind == dlock.EventLost {
			held <- lock.Load().Held()
		}
	})
	l, err := m.TryAcquire(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lock.Store(l)
	within(t, "Lost", func() error {
		driver.Lost(l, fmt.Errorf("dlock: %w: the session ended", dlock.ErrLockLost))
		return nil
	})
	if ks := r.kinds(); !slices.Equal(ks, []string{"attempt", "granted", "lost"}) {
		t.Fatalf("events %v once Lost returned, want attempt, granted, lost", ks)
	}
	if <-held {
		t.Fatal("the observer of the loss saw the lock held")
	}
	l.Release(context.Background())
}
