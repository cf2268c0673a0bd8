package dlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// keyNotifier is a memLocker that announces the releases of each key to
// the waits registered on it, when the test says so.
type keyNotifier struct {
	*memLocker
	mu      sync.Mutex
	waits   map[string][]chan struct{}
	stopped int
}

func (n *keyNotifier) NotifyRelease(_ context.Context, key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	n.waits[key] = append(n.waits[key], ch)
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		n.stopped++
		n.mu.Unlock()
	}
}

// announce tells the waits on key that it was released, and returns how
// many there were.
func (n *keyNotifier) announce(key string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.waits[key] {
		ch <- struct{}{}
	}
	return len(n.waits[key])
}

// silentNotifier is a memLocker whose NotifyRelease announces nothing.
type silentNotifier struct {
	*memLocker
	stopped atomic.Int32
}

func (n *silentNotifier) NotifyRelease(context.Context, string) (<-chan struct{}, func()) {
	return nil, func() { n.stopped.Add(1) }
}

// When no slot's release will be announced, the generic semaphore says so
// with a nil channel, as driver.ReleaseNotifier asks (the wait polls, and
// the conformance suite skips its wake-up test), and stops every slot's
// registration at once.
func TestGenericSemaphoreSaysWhenNoSlotAnnounces(t *testing.T) {
	n := &silentNotifier{memLocker: newMem()}
	sem, ok := dlock.Semaphore(n, 3).(interface {
		NotifyRelease(context.Context, string) (<-chan struct{}, func())
	})
	if !ok {
		t.Fatal("dlock.Semaphore's Locker has no NotifyRelease")
	}
	released, stop := sem.NotifyRelease(context.Background(), "api")
	defer stop()
	if released != nil || n.stopped.Load() != 3 {
		t.Errorf("NotifyRelease: channel %v, %d of 3 registrations stopped; want nil and 3", released, n.stopped.Load())
	}
}

// A Locker without semaphores of its own gets dlock's: its locks on the
// slots' keys, and a wait woken by the release of any slot through the
// Locker's own announcements, each registration stopped when the wait
// ends.
func TestGenericSemaphoreWakesOnAnySlot(t *testing.T) {
	n := &keyNotifier{memLocker: newMem(), waits: map[string][]chan struct{}{}}
	sem := dlock.Semaphore(n, 3)
	held := make([]*dlock.Lock, 3)
	for i := range held {
		lock, err := sem.TryAcquire(context.Background(), "api", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if lock.Slot() != i || lock.Key() != "{api}#"+string(rune('0'+i)) {
			t.Fatalf("permit %d: slot %d, key %q", i, lock.Slot(), lock.Key())
		}
		held[i] = lock
	}
	type result struct {
		lock *dlock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		lock, err := dlock.Acquire(context.Background(), sem, "api", time.Minute,
			dlock.WithRetryDelay(time.Minute), dlock.WithRetryJitter(0))
		done <- result{lock, err}
	}()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.waits["{api}#2"]) == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond) // its first attempt fails; the release comes after
	if err := held[2].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.announce("{api}#2"); got != 1 {
		t.Fatalf("%d waits registered on slot 2, want 1", got)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.lock.Slot() != 2 {
			t.Fatalf("woken waiter took slot %d, want the released 2", r.lock.Slot())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by slot 2's release; its poll was a minute away")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped != 3 {
		t.Fatalf("%d of 3 registrations stopped after the wait", n.stopped)
	}
}

// A lock is no permit: Slot is -1 and the key is the caller's. A Locker
// without semaphores of its own keeps no limit for SetLimit to change.
func TestGenericSemaphoreKeepsNoLimit(t *testing.T) {
	m := newMem()
	lock, err := m.TryAcquire(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if lock.Slot() != -1 || lock.Key() != "k" {
		t.Fatalf("a lock: slot %d, key %q; want -1 and \"k\"", lock.Slot(), lock.Key())
	}
	lockcheck.WantError(t, dlock.SetLimit(context.Background(), m, "k", 2), dlock.ErrInvalid)
	_, err = dlock.Semaphore(nil, 2).TryAcquire(context.Background(), "k", time.Minute)
	lockcheck.WantError(t, err, dlock.ErrInvalid)
}

// The grant's event names the permit's slot, like the events that follow
// it; the attempts name the semaphore.
func TestSemaphoreEventsNameTheSlot(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	m := newObserved(func(_ context.Context, e dlock.Event) {
		mu.Lock()
		keys = append(keys, e.Kind.String()+" "+e.Key)
		mu.Unlock()
	})
	err := dlock.Do(context.Background(), dlock.Semaphore(m, 2), "api", time.Minute, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"attempt {api}#0", "granted {api}#0", "released {api}#0"}
	if len(keys) != len(want) {
		t.Fatalf("events %q, want %q", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("events %q, want %q", keys, want)
		}
	}
}
