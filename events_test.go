package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []dlock.Event
}

func (r *recorder) observe(_ context.Context, e dlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []string
	for _, e := range r.events {
		ks = append(ks, e.Kind.String())
	}
	return ks
}

func (r *recorder) last(k dlock.EventKind) dlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Kind == k {
			return r.events[i]
		}
	}
	return dlock.Event{}
}

func TestEventsOfDo(t *testing.T) {
	var r recorder
	extended := make(chan struct{}, 1)
	observe := func(ctx context.Context, e dlock.Event) {
		r.observe(ctx, e)
		if e.Kind == dlock.EventExtended {
			select {
			case extended <- struct{}{}:
			default:
			}
		}
	}
	var held time.Duration
	err := dlock.Do(context.Background(), newObserved(observe), "k", 300*time.Millisecond, func(ctx context.Context) error {
		start := time.Now()
		defer func() { held = time.Since(start) }()
		select { // past one extension at least
		case <-extended:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ks := r.kinds()
	if len(ks) < 4 || ks[0] != "attempt" || ks[1] != "granted" || ks[len(ks)-1] != "released" || !slices.Contains(ks, "extended") {
		t.Fatalf("events %v, want attempt, granted, extended..., released", ks)
	}
	g := r.last(dlock.EventGranted)
	if g.Key != "k" || g.Fence == 0 || g.Attempts != 1 || g.Wait <= 0 {
		t.Fatalf("granted event %+v", g)
	}
	if rel := r.last(dlock.EventReleased); rel.Err != nil || rel.Hold < held || rel.Fence != g.Fence {
		t.Fatalf("released event %+v, want no error and a hold of at least %v", rel, held)
	}
}

func TestEventsOfRefusal(t *testing.T) {
	m := newMem()
	held, err := m.TryAcquire(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	var r recorder
	m.events = driver.NewEvents("", nil, r.observe)
	_, err = dlock.Acquire(context.Background(), m, "k", time.Minute,
		dlock.WithRetryCount(2), dlock.WithRetryDelay(time.Millisecond), dlock.WithRetryJitter(0))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("got %v, want ErrNotAcquired", err)
	}
	if ks := r.kinds(); !slices.Equal(ks, []string{"attempt", "attempt", "attempt", "refused"}) {
		t.Fatalf("events %v", ks)
	}
	if e := r.last(dlock.EventRefused); e.Attempts != 3 || !errors.Is(e.Err, dlock.ErrNotAcquired) {
		t.Fatalf("refused event %+v", e)
	}

	// A wait that its context ends is a refusal too.
	r = recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = dlock.Acquire(ctx, m, "k", time.Minute)
	if e := r.last(dlock.EventRefused); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(e.Err, context.DeadlineExceeded) {
		t.Fatalf("got %v and refused event %+v, want both to match DeadlineExceeded", err, e)
	}
}

func TestEventsOfLoss(t *testing.T) {
	var r recorder
	m := newObserved(r.observe)
	err := dlock.Do(context.Background(), m, "k", 40*time.Millisecond, func(ctx context.Context) error {
		m.free("k") // the server forgets the lock: the next extension is refused
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("got %v, want ErrLockLost", err)
	}
	lost := r.last(dlock.EventLost)
	if lost.Detected != "extension refused" || !errors.Is(lost.Err, dlock.ErrNotHeld) || lost.Hold <= 0 {
		t.Fatalf("lost event %+v", lost)
	}
	if f := r.last(dlock.EventExtendFailed); !errors.Is(f.Err, dlock.ErrNotHeld) {
		t.Fatalf("extend-failed event %+v", f)
	}
	if rel := r.last(dlock.EventReleased); !errors.Is(rel.Err, dlock.ErrNotHeld) {
		t.Fatalf("released event %+v, want ErrNotHeld", rel)
	}
}

// A loss the backend declares between its grant and the attempt's return
// (etcdlock's, when it finds the lease gone) reaches the observers, after
// the grant, of a bare TryAcquire and of Acquire.
func TestEventsOfLossAtGrant(t *testing.T) {
	for _, wait := range []bool{false, true} {
		var r recorder
		m := newObserved(r.observe)
		m.granted = func(lock *dlock.Lock) {
			driver.Lost(lock, fmt.Errorf("dlock: %w: the session ended", dlock.ErrLockLost))
		}
		var lock *dlock.Lock
		var err error
		if wait {
			lock, err = dlock.Acquire(context.Background(), m, "k", time.Minute)
		} else {
			lock, err = m.TryAcquire(context.Background(), "k", time.Minute)
		}
		if err != nil {
			t.Fatal(err)
		}
		if lock.Held() {
			t.Fatal("the lost lock reports held")
		}
		if ks := r.kinds(); !slices.Equal(ks, []string{"attempt", "granted", "lost"}) {
			t.Fatalf("Acquire %v: events %v, want attempt, granted, lost", wait, ks)
		}
		if lost := r.last(dlock.EventLost); lost.Detected != "session gone" || !errors.Is(lost.Err, dlock.ErrLockLost) {
			t.Fatalf("lost event %+v", lost)
		}
	}
}

func TestEventsOfExpiry(t *testing.T) {
	var r recorder
	m := newObserved(r.observe)
	m.extend = func(ctx context.Context, ttl time.Duration) error { <-ctx.Done(); return ctx.Err() } // extensions hang
	err := dlock.Do(context.Background(), m, "k", 40*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("got %v, want ErrLockLost", err)
	}
	if lost := r.last(dlock.EventLost); lost.Detected != "validity ran out" {
		t.Fatalf("lost event %+v", lost)
	}
}

func TestObserversAllReceive(t *testing.T) {
	var a, b recorder
	lock, err := dlock.Acquire(context.Background(), newObserved(a.observe, b.observe), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lock.Release(context.Background())
	if ka, kb := a.kinds(), b.kinds(); !slices.Equal(ka, []string{"attempt", "granted", "released"}) || !slices.Equal(ka, kb) {
		t.Fatalf("observers saw %v and %v", ka, kb)
	}
}

// An observer that panics: the panic reaches the call that delivered the
// event, the handle stays usable (no mutex left held), and the next call
// delivers the events after it.
func TestObserverPanicLeavesTheLockUsable(t *testing.T) {
	var r recorder
	m := newObserved(func(ctx context.Context, e dlock.Event) {
		if e.Kind == dlock.EventExtended {
			panic("observer")
		}
		r.observe(ctx, e)
	})
	ctx := context.Background()
	lock, err := m.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Extend did not pass the observer's panic on")
			}
		}()
		_ = lock.Extend(ctx, time.Minute)
	}()
	if !lock.Held() {
		t.Fatal("the lock is not held after the observer's panic")
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.kinds(); !slices.Equal(got, []string{"attempt", "granted", "released"}) {
		t.Errorf("events %v, want attempt, granted, released", got)
	}
}
