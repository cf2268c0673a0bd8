package redlock

// SetClockOffset moves node i's clock, as the fence rule reads it, by µs
// microseconds: a test's stand-in for a node whose clock stepped.
func (l *Locker) SetClockOffset(i int, µs int64) { l.nodes[i].ClockOffset = µs }

// BatchWaiting reports how many script calls wait for node i's next batch.
func (l *Locker) BatchWaiting(i int) int { return l.nodes[i].BatchWaiting() }
