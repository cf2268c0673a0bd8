package wake

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A retry asked for sooner replaces a later one (a deferred turn behind the
// expiry of a lock hours away), a later one does not replace a sooner, and
// a cancelled retry does not fire.
func TestRetry(t *testing.T) {
	n := New([]redis.UniversalClient{nil}) // sends nothing: no subscription, no queue
	defer n.Close()
	released, stop := n.Register("k")
	defer stop()
	in := n.byKey["k"]
	retryAt := func(d time.Duration) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.retryAt(in, time.Now().Add(d))
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-released:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no retry within 5s", what)
		}
	}

	retryAt(time.Hour)
	retryAt(time.Millisecond)
	wait("an hour, then a millisecond")

	retryAt(time.Millisecond)
	retryAt(time.Hour)
	wait("a millisecond, then an hour")

	n.mu.Lock()
	n.retryAt(in, time.Now().Add(50*time.Millisecond))
	n.forget(in) // what leave and Close do
	n.mu.Unlock()
	select {
	case <-released:
		t.Fatal("a cancelled retry fired")
	case <-time.After(200 * time.Millisecond): // past the cancelled retry's time: nothing came
	}
}
