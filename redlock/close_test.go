package redlock_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// TestCloseKeepsLocks: Close ends the Locker's subscriptions and waits for
// releases under way, not its locks: they stay held and truthful, and the
// Locker still works.
func TestCloseKeepsLocks(t *testing.T) {
	l := newLocker(t, shared)
	lockcheck.CloseKeepsLocks(t, l, newLocker(t, shared), l.Close)
}
