package redislock

import "context"

// Features exposes which native commands the Locker chose, for tests.
func (l *Locker) Features(ctx context.Context) (del, set bool) { return l.features(ctx) }

// SetClockOffset moves the server's clock, as the fence rule reads it, by
// µs microseconds: a test's stand-in for a server clock that stepped.
func (l *Locker) SetClockOffset(µs int64) { l.clockOffset = µs }

// BatchWaiting reports how many script calls wait for the Locker's next
// batch.
func (l *Locker) BatchWaiting() int { return l.batch.Waiting() }
