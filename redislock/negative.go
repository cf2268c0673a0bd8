package redislock

import "github.com/dlock-go/dlock/internal/testkit/negative"

// The hook of dlock torture's negative control without a drift margin (see
// internal/testkit/negative).
func init() {
	negative.RedislockDriftFactor = func(l any, f float64) { l.(*Locker).cfg.DriftFactor = f }
}
