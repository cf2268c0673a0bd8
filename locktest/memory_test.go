package locktest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The suite proves a backend written outside the backends' packages, with
// only the public dlock and driver packages, that has TryAcquire and
// nothing else (no release announcements: dlock.Acquire polls it):
// package dlocktest's Locker seen through the dlock.Locker interface
// alone. dlocktest's own tests run the suite on the whole Locker.
func TestConformanceOfATryOnlyBackend(t *testing.T) {
	l := dlocktest.New()
	newLocker := func(*testing.T) dlock.Locker { return struct{ dlock.Locker }{l} }
	locktest.Run(t, newLocker, locktest.WithLapse(func(_ *testing.T, key string) { l.Lose(key) }))
	locktest.RunOutage(t, newLocker, func(*testing.T) (end func()) {
		l.Fail(nil)
		return l.Heal
	})
}

// The election suite on the same backend: without a TermReader, Leader
// and Observe fall back to probing with TryAcquire, and without release
// announcements a resignation reaches the next candidate at its poll.
// dlocktest's own tests run it on the whole Locker.
func TestElectionOfATryOnlyBackend(t *testing.T) {
	l := dlocktest.New()
	locktest.RunElection(t, func(*testing.T) dlock.Locker { return struct{ dlock.Locker }{l} },
		locktest.WithLapse(func(_ *testing.T, key string) { l.Lose(key) }))
}
