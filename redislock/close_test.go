package redislock_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// TestCloseKeepsLocks: Close ends the Locker's subscription to release
// announcements, not its locks: they stay held and truthful, and the
// Locker still works.
func TestCloseKeepsLocks(t *testing.T) {
	l := newLocker(t, shared.Client(t))
	lockcheck.CloseKeepsLocks(t, l, newLocker(t, shared.Client(t)), l.Close)
}
