package dlock

import "time"

// DefaultDriftFactor is the share of the TTL that validity computations set
// aside for clocks that tick at slightly different rates, as in the Redis
// documentation's reference clients.
const DefaultDriftFactor = 0.01

// CheckDriftFactor rejects a drift factor outside [0, 1) (or NaN) with an
// error that matches ErrInvalid.
func CheckDriftFactor(f float64) error {
	if !(f >= 0 && f < 1) {
		return Invalidf("drift factor %v: must be in [0, 1)", f)
	}
	return nil
}

// Drift returns the safety margin subtracted from a TTL when computing a
// lock's validity: ttl × factor plus 2 ms (1 ms for Redis's expiry precision
// and 1 ms as a floor), as in antirez's reference implementation.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// ValidUntil returns the validity deadline of a lock acquired or extended
// with ttl by a request sent at start: start + ttl - drift. Measuring from
// the moment before the request was sent is what makes it safe: the server
// started its TTL later than that. A deadline that is not after the moment
// the reply arrived means the lock must not be used.
func ValidUntil(start time.Time, ttl time.Duration, driftFactor float64) time.Time {
	return start.Add(ttl - Drift(ttl, driftFactor))
}
