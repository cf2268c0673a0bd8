package lockcheck

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it returns nil, and
// fails the test with cond's last error if that takes longer than within.
// It is for state that no event announces: a key's expiry on the server, a
// queue entry another process writes, a session the server ends. Where a
// signal exists, wait for it instead.
func Eventually(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
