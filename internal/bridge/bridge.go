// Package bridge is the one home of the rules every backend applies (a
// TTL, its validity, a key, a token, a semaphore's slots and limit), and
// holds the hooks into *dlock.Lock (as any) that package dlock sets for
// package driver, which imports it.
package bridge

import (
	"context"
	"crypto/rand"
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

const MaxLimit = 1000

// The hooks package dlock sets (see driver's functions of the same names).
var (
	// NewLock wraps g, a driver.Grant; slot is a permit's, -1 for a lock.
	NewLock func(key string, slot int, token string, fence uint64, validUntil time.Time, g any) any
	Lose    func(lock any, cause error)
	Recheck func(lock any)
	// Attempt tells package dlock that an attempt of a Locker of backend,
	// whose events go to observe (a func(context.Context, dlock.Event)),
	// begins with ctx; it returns the attempt's number, and whether it is
	// one of dlock.Acquire's, which then reports the grant or refusal
	// itself (driver's Events.Attempt).
	Attempt func(ctx context.Context, backend string, observe any) (n int, waiting bool)
	// Observe makes lock send its events to observe, naming backend, and
	// returns how many nodes granted it.
	Observe  func(lock any, backend string, observe any) (nodes int)
	Identity func(ctx context.Context) string
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

// LimitProblem says what is wrong with a semaphore's limit, or "".
func LimitProblem(limit int) string {
	if limit < 1 || limit > MaxLimit {
		return fmt.Sprintf("semaphore limit %d: must be between 1 and %d", limit, MaxLimit)
	}
	return ""
}

// Final carries an attempt's error that waiting cannot change, though its
// sentinel is one dlock.Acquire would retry (pglock's ErrPoolExhausted):
// dlock.Acquire returns it at once.
type Final struct{ Err error }

func (f *Final) Error() string { return f.Err.Error() }
func (f *Final) Unwrap() error { return f.Err }

// TTLProblem says what is wrong with ttl, or "".
func TTLProblem(ttl time.Duration) string {
	switch {
	case ttl <= 0:
		return fmt.Sprintf("ttl %v: must be positive", ttl)
	case ttl < time.Millisecond:
		return fmt.Sprintf("ttl %v: must be at least 1ms", ttl)
	case ttl > MaxTTL:
		return fmt.Sprintf("ttl %v: exceeds the maximum of %v", ttl, MaxTTL)
	}
	return ""
}

// ValidityProblem is TTLProblem, or that ttl leaves no validity after the
// drift margin of factor.
func ValidityProblem(ttl time.Duration, factor float64) string {
	if p := TTLProblem(ttl); p != "" {
		return p
	}
	if d := Drift(ttl, factor); ttl <= d {
		return fmt.Sprintf("ttl %v: must exceed the clock-drift margin %v", ttl, d)
	}
	return ""
}

// KeyProblem says what is wrong with a lock key, or "".
func KeyProblem(key string) string {
	if key == "" {
		return "empty lock key"
	}
	return ""
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
