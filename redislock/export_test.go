package redislock

import (
	"context"

	"github.com/dlock-go/dlock/internal/rclient"
)

// Features exposes which native commands the Locker chose, for tests.
func (l *Locker) Features(ctx context.Context) rclient.Native { return l.node.Features(ctx) }

// SetFeatures makes the Locker use native commands as if its probe had
// found n.
func (l *Locker) SetFeatures(n rclient.Native) { l.node.SetFeatures(n) }

// SetClockOffset moves the server's clock, as the fence rule reads it, by
// µs microseconds: a test's stand-in for a server clock that stepped.
func (l *Locker) SetClockOffset(µs int64) { l.node.ClockOffset = µs }

// BatchWaiting reports how many script calls wait for the Locker's next
// batch.
func (l *Locker) BatchWaiting() int { return l.node.BatchWaiting() }
