package dlock

import "time"

// SetClock makes l read the time from now, so that a test can move a
// handle's clock past its validity without waiting (or letting any other
// goroutine run).
func SetClock(l *Lock, now func() time.Time) { l.now = now }

// Backoff is the wait after the n-th unreachable attempt in a row.
var Backoff = backoff
