package wake

import (
	"sync"
	"testing"
	"time"
)

// A retry asked for sooner replaces a later one (a deferred turn behind the
// expiry of a lock hours away), a later one does not replace a sooner, and
// a cancelled retry does not fire.
func TestRetry(t *testing.T) {
	var mu sync.Mutex // the owner's mutex
	var r Retry
	fired := make(chan bool, 4)
	fire := func() {
		mu.Lock()
		defer mu.Unlock()
		fired <- r.Take()
	}
	wait := func(what string) {
		t.Helper()
		select {
		case live := <-fired:
			if !live {
				t.Fatalf("%s: the timer fired for a retry no longer pending", what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no retry within 5s", what)
		}
	}

	mu.Lock()
	r.At(time.Now().Add(time.Hour), fire)
	r.At(time.Now().Add(time.Millisecond), fire)
	mu.Unlock()
	wait("an hour, then a millisecond")

	mu.Lock()
	r.At(time.Now().Add(time.Millisecond), fire)
	r.At(time.Now().Add(time.Hour), fire)
	mu.Unlock()
	wait("a millisecond, then an hour")

	mu.Lock()
	r.At(time.Now().Add(50*time.Millisecond), fire)
	r.Cancel()
	pending := r.Take()
	mu.Unlock()
	if pending {
		t.Fatal("a cancelled retry is still pending")
	}
	select {
	case live := <-fired:
		if live {
			t.Fatal("a cancelled retry fired")
		}
	case <-time.After(200 * time.Millisecond): // past the cancelled retry's time: nothing came
	}
}
