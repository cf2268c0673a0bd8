package wake

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A stop called again changes nothing: not the interest a later wait on
// the same key made, nor the waiters that share the first one's, nor where
// an unused wake-up goes.
func TestStopTwice(t *testing.T) {
	n := New([]redis.UniversalClient{nil}) // sends nothing: no subscription, no queue
	defer n.Close()
	current := func() *interest {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.byKey["k"]
	}
	fire := func(in *interest) { // as an announcement would: the earliest waiter
		n.mu.Lock()
		defer n.mu.Unlock()
		signal(in.waiters[0])
	}
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}

	// The last waiter's second stop, after another wait on the key began.
	_, stop1 := n.Register("k")
	stop1()
	released2, stop2 := n.Register("k")
	in2 := current()
	stop1()
	if got := current(); got != in2 {
		t.Fatalf("a second stop removed the later wait's interest: %p, want %p", got, in2)
	}
	fire(in2)
	if !woken(released2) {
		t.Fatal("the later wait was not woken")
	}

	// A second stop of a waiter that shared the interest: the others stay,
	// and a wake-up goes to the earliest of them.
	released3, stop3 := n.Register("k")
	_, stop4 := n.Register("k")
	stop2()
	stop2()
	if got := current(); got != in2 || len(got.waiters) != 2 {
		t.Fatalf("after stopping one of three waiters twice: interest %p with %d waiters, want %p with 2",
			got, len(got.waiters), in2)
	}
	fire(in2)
	if !woken(released3) {
		t.Fatal("the earliest remaining waiter was not woken")
	}
	stop3()
	stop4()
	stop4()
	if got := current(); got != nil {
		t.Fatalf("interest %p left after every waiter stopped", got)
	}
}
