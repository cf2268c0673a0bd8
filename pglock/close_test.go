package pglock_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// TestCloseKeepsLocks: Close stops the Locker's release listener, not its
// locks: they keep their sessions, stay held and truthful, and the Locker
// still works.
func TestCloseKeepsLocks(t *testing.T) {
	l := newLocker(t, 4)
	lockcheck.CloseKeepsLocks(t, l, newLocker(t, 4), l.Close)
}
