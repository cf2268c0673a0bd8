// Package bridge is the one home of the rules every backend applies (a
// TTL, its validity, a key, a token, a semaphore's slots and limit) and of
// the error they return (dlock.ErrInvalid, which is ErrInvalid), and holds
// the hooks into *dlock.Lock (as any) that package dlock sets for
// package driver, which imports it.
package bridge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/keys"
)

// MaxTTL is the longest TTL: a crashed holder blocks everyone that long.
const MaxTTL = 30 * 24 * time.Hour

// DefaultDriftFactor is the share of the TTL set aside for clock drift
// (see Drift).
const DefaultDriftFactor = 0.01

// MaxLimit is the largest limit a semaphore may have.
const MaxLimit = 1000

// ErrInvalid is dlock.ErrInvalid (documented there).
var ErrInvalid = errors.New("invalid argument")

// Invalidf returns an error that matches ErrInvalid.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// The hooks package dlock sets (see driver's functions of the same names).
var (
	// NewLock wraps g, a driver.Grant; slot is a permit's, -1 for a lock.
	NewLock func(key string, slot int, token string, fence uint64, validUntil time.Time, g any) any
	Lose    func(lock any, cause error)
	Recheck func(lock any)
	// Attempt and Attempted report an attempt's events (driver's
	// Events.Attempt; dlock's attempt and attempted say how): observe is
	// a func(context.Context, dlock.Event), lock a *dlock.Lock.
	Attempt   func(ctx context.Context, key, backend string, observe any) (began time.Time)
	Attempted func(ctx context.Context, key, backend string, observe, lock any, err error, began time.Time)
	Identity  func(ctx context.Context) string
)

// SlotKey returns the key of slot of name's semaphore (see dlock.Semaphore).
func SlotKey(name string, slot int) string {
	if keys.HasHashTag(name) {
		return name + "#" + strconv.Itoa(slot)
	}
	return "{" + name + "}#" + strconv.Itoa(slot)
}

// SlotPrefix is what the keys of name's slots begin with; it names the
// semaphore on the servers.
func SlotPrefix(name string) string { return strings.TrimSuffix(SlotKey(name, 0), "0") }

// SlotPrefixOf returns SlotPrefix of the semaphore whose slot key key is,
// or false for a key not of SlotKey's form.
func SlotPrefixOf(key string) (string, bool) {
	prefix := strings.TrimRight(key, "0123456789")
	if len(prefix) == len(key) || !strings.HasSuffix(prefix, "#") || !keys.HasHashTag(prefix) {
		return "", false
	}
	return prefix, true
}

// CheckLimit refuses a semaphore's limit outside [1, MaxLimit].
func CheckLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return Invalidf("semaphore limit %d: must be between 1 and %d", limit, MaxLimit)
	}
	return nil
}

// Final carries an attempt's error that waiting cannot change, though its
// sentinel is one dlock.Acquire would retry (pglock's ErrPoolExhausted):
// dlock.Acquire returns it at once.
type Final struct{ Err error }

func (f *Final) Error() string { return f.Err.Error() }
func (f *Final) Unwrap() error { return f.Err }

// CheckTTL refuses a ttl no backend honours (see driver.Check).
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

// CheckValidity is CheckTTL, also refusing a ttl that leaves no validity
// after the drift margin of factor.
func CheckValidity(ttl time.Duration, factor float64) error {
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	if d := Drift(ttl, factor); ttl <= d {
		return Invalidf("ttl %v: must exceed the clock-drift margin %v", ttl, d)
	}
	return nil
}

// CheckKey refuses an empty lock key.
func CheckKey(key string) error {
	if key == "" {
		return Invalidf("empty lock key")
	}
	return nil
}

// Milliseconds returns ttl in whole milliseconds, rounded up (Redis's PX).
func Milliseconds(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// NewToken returns a random lock token: 128 bits, 26 base32 characters.
func NewToken() string { return rand.Text() }

// Drift returns the margin subtracted from a TTL for a lock's validity
// (see driver.ValidUntil).
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// ValidUntil is the validity deadline of a request sent at start (see
// driver.ValidUntil).
func ValidUntil(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(ttl - Drift(ttl, factor))
}
