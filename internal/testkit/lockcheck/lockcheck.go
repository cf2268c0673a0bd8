// Package lockcheck holds the assertions that the conformance suite
// (package locktest) and the backends' own tests share: an error's one
// sentinel, unique keys, a lock taken or the test failed, waits for state
// no event announces, and checks of promises some backends make (a fence
// history through faults, a Close that keeps locks, a refusal that does
// not wait).
package lockcheck

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TTL is the lease the tests use where expiry is the point: short, with
// generous margins around it for a busy machine.
const TTL = 300 * time.Millisecond

var keySeq atomic.Int64

// Key returns a key unique to the test.
func Key(t *testing.T) string {
	return fmt.Sprintf("locktest:%s:%d", t.Name(), keySeq.Add(1))
}

// Ctx returns a context that ends after 20s, or when the test does.
func Ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// MustAcquire takes key with l for ttl, or fails the test; the lock is
// released when the test ends.
func MustAcquire(t *testing.T, l dlock.Locker, key string, ttl time.Duration) *dlock.Lock {
	t.Helper()
	lock, err := l.TryAcquire(Ctx(t), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	t.Cleanup(func() { lock.Release(context.Background()) })
	return lock
}
