package dlock

import "time"

// MaxTTL is the longest TTL any backend accepts. Longer leases defeat the
// point of a TTL (a crashed holder blocks everyone for that long) and
// approach the limits of Redis's millisecond arithmetic.
const MaxTTL = 30 * 24 * time.Hour

// CheckKey rejects an empty key with an error that matches ErrInvalid.
func CheckKey(key string) error {
	if key == "" {
		return Invalidf("empty lock key")
	}
	return nil
}

// CheckToken rejects an empty key or token, with an error that matches
// ErrInvalid. It is for the operations that take a token instead of a handle
// (a lock held across shell commands).
func CheckToken(key, token string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if token == "" {
		return Invalidf("empty token")
	}
	return nil
}

// CheckTTL rejects a TTL that no backend can honour: not positive, under one
// millisecond (Redis's PX would round it to zero) or above MaxTTL. TTLs that
// are not whole milliseconds are accepted; backends round them up.
func CheckTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return Invalidf("ttl %v: must be positive", ttl)
	case ttl < time.Millisecond:
		return Invalidf("ttl %v: must be at least 1ms", ttl)
	case ttl > MaxTTL:
		return Invalidf("ttl %v: exceeds the maximum of %v", ttl, MaxTTL)
	}
	return nil
}

// Milliseconds returns ttl in whole milliseconds, rounded up, as Redis's PX
// and PEXPIRE take it.
func Milliseconds(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}
