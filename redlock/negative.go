package redlock

import "github.com/dlock-go/dlock/internal/testkit/negative"

// The hooks of dlock torture's negative controls (see internal/testkit/negative).
func init() {
	negative.RedlockQuorum = func(l any, q int) { l.(*Locker).quorum = q }
	negative.RedlockDriftFactor = func(l any, f float64) { l.(*Locker).cfg.DriftFactor = f }
}
