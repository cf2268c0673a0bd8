// Package bridge holds what package dlock shares with package driver
// without showing it to users of locks: the rules every backend applies
// (the TTL's limits and rounding, validity, what a key and a token must
// be, how a token is drawn, a semaphore's slots and limit: their one home,
// which driver.Check and the internal packages call) and the constructor
// of a Lock, which package dlock sets from an init function (driver
// imports dlock, so dlock cannot import driver).
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

// MaxTTL is the longest TTL any backend accepts: a crashed holder would
// block everyone for that long.
const MaxTTL = 30 * 24 * time.Hour

// DefaultDriftFactor is the share of the TTL that validity computations
// set aside for clocks that tick at slightly different rates, as in the
// Redis documentation's reference clients.
const DefaultDriftFactor = 0.01

// NewLock wraps a backend's grant in a *dlock.Lock (returned as any); g
// must implement driver.Grant. slot is the permit's slot of a semaphore's
// grant, -1 for a lock. Package dlock sets it.
var NewLock func(key string, slot int, token string, fence uint64, validUntil time.Time, g any) any

// MaxLimit is the largest limit a semaphore may have.
const MaxLimit = 1000

// SlotKey returns the key of slot of name's semaphore, its permits' Key:
// {name}#slot, such as "{vendor-api}#2", or name#slot for a name that has
// a Redis Cluster hash tag already ("{tenant:7}:exports#2"). The tag puts
// every slot of a name in one Cluster slot, so that one Redis script can
// look at them all. Names that differ only by such braces ("a" and "{a}")
// name one semaphore.
func SlotKey(name string, slot int) string {
	if keys.HasHashTag(name) {
		return name + "#" + strconv.Itoa(slot)
	}
	return "{" + name + "}#" + strconv.Itoa(slot)
}

// SlotPrefix is what the keys of name's slots begin with, the slot's
// number following: {name}# (or name# for a name with a hash tag). It
// names the semaphore on the servers: "a" and "{a}" are one semaphore.
func SlotPrefix(name string) string { return strings.TrimSuffix(SlotKey(name, 0), "0") }

// SlotPrefixOf returns SlotPrefix of the semaphore whose slot key key is,
// or false for a key that is not of a slot key's form (SlotKey: a hash
// tag, then "#" and a slot number).
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

// Lose declares a *dlock.Lock (given as any) lost with cause (see
// driver.Lost). Package dlock sets it.
var Lose func(lock any, cause error)

// Recheck makes a *dlock.Lock (given as any) look at its clock again (see
// driver.Recheck). Package dlock sets it.
var Recheck func(lock any)

// Attempt tells package dlock that an attempt of a Locker of backend, whose
// events go to observe (a func(context.Context, dlock.Event)), begins with
// ctx, and returns the attempt's number, and whether it is one of
// dlock.Acquire's, which then reports the grant or the refusal itself
// (driver's Events.Attempt). Package dlock sets it.
var Attempt func(ctx context.Context, backend string, observe any) (n int, waiting bool)

// Observe makes a *dlock.Lock (given as any) send its events to observe,
// naming backend, and returns how many nodes granted it. Package dlock sets
// it.
var Observe func(lock any, backend string, observe any) (nodes int)

// Identity returns the identity that dlock.Acquire was asked to publish
// with the grant of the attempt that ctx belongs to, or "" (see
// driver.Identity). Package dlock sets it.
var Identity func(ctx context.Context) string

// Final carries an attempt's error that waiting cannot change, though its
// sentinel is one dlock.Acquire would retry: a pool whose connections are
// all pinned by the Locker's own locks (pglock's ErrPoolExhausted), which
// may be the caller's. dlock.Acquire and dlock.Do return it at once.
type Final struct{ Err error }

func (f *Final) Error() string { return f.Err.Error() }
func (f *Final) Unwrap() error { return f.Err }

// TTLProblem says what is wrong with ttl, or "" when every backend can
// honour it.
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

// ValidityProblem says what is wrong with ttl for a backend whose
// validity sets factor of it aside for clock drift (see Drift): what
// TTLProblem says, or that it leaves no validity; or "".
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

// TokenProblem says what is wrong with a lock token, or "".
func TokenProblem(token string) string {
	if token == "" {
		return "empty token"
	}
	return ""
}

// DriftFactorProblem says what is wrong with a drift factor, or "".
func DriftFactorProblem(f float64) string {
	if !(f >= 0 && f < 1) {
		return fmt.Sprintf("drift factor %v: must be in [0, 1)", f)
	}
	return ""
}

// Milliseconds returns ttl in whole milliseconds, rounded up, as Redis's
// PX and PEXPIRE take it.
func Milliseconds(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// NewToken returns a fresh random lock token: 128 bits from crypto/rand,
// encoded as 26 base32 characters. Backends use it as the value of a lock
// key so that only the holder can extend or release it.
func NewToken() string { return rand.Text() }

// Drift returns the safety margin subtracted from a TTL when computing a
// lock's validity: ttl × factor plus 2 ms (1 ms for Redis's expiry
// precision and 1 ms as a floor), as in antirez's reference
// implementation.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + 2*time.Millisecond
}

// ValidUntil is the validity deadline of a request sent at start (see
// driver.ValidUntil).
func ValidUntil(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(ttl - Drift(ttl, factor))
}
