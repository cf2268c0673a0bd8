package redislock

import (
	"context"
	"time"
)

// Features exposes which native commands the Locker chose, for tests.
func (l *Locker) Features(ctx context.Context) (del, set bool) { return l.features(ctx) }

// SetPolicy changes the hand-off threshold T and the reservation R of a new
// Locker, for tests that need them long or short.
func (l *Locker) SetPolicy(handoff, reserve time.Duration) { l.setPolicy(handoff, reserve) }

// SetDirectAfter changes how long a lock must be held before its release
// may grant it directly, for tests that need every release to reserve.
func (l *Locker) SetDirectAfter(d time.Duration) { l.directAfter = d }

// SetBackAtOnce changes how soon after a short hold's release a Locker's
// next attempt counts as coming back at once, for tests that cannot be
// that quick.
func (l *Locker) SetBackAtOnce(d time.Duration) { l.backAtOnce = d }
