package fence

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/bridge"
)

// ErrStale means the guard refused an operation because its fence is stale:
// lower than the highest fence the resource has seen, or equal to it but
// presented by a holder other than the one that set it. Nothing was applied.
// Errors that match it are *StaleError values.
var ErrStale = errors.New("fence: stale fence")

// StaleError describes a refused operation. It matches ErrStale with
// errors.Is; use errors.As to read the fences.
type StaleError struct {
	Op       string // "register", "read" or "write"
	Resource string
	Fence    uint64 // the fence the caller presented
	Highest  uint64 // the highest fence the resource had seen
	// Tie is true when Fence equals Highest but another holder (token) set
	// it: after node faults two holders can carry the same fence.
	Tie bool
}

func (e *StaleError) Error() string {
	if e.Tie {
		return fmt.Sprintf("fence: %s %q: stale fence %d: another holder already used fence %d", e.Op, e.Resource, e.Fence, e.Highest)
	}
	return fmt.Sprintf("fence: %s %q: stale fence %d: highest seen is %d", e.Op, e.Resource, e.Fence, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Check applies the guard rule to one request: it returns nil when a
// resource whose highest fence is highest, set by highestToken, accepts
// fence from token, and a *StaleError otherwise. A resource never touched
// has highest 0. Guards for other stores (package redisfence, a SQL guard)
// implement the same rule; Check is the reference they are tested against.
//
// The rule: fence > highest is accepted; fence == highest is accepted only
// from highestToken; anything else is stale. Check does not validate its
// arguments; see Validate.
func Check(op, resource string, fence uint64, token string, highest uint64, highestToken string) error {
	switch {
	case fence > highest:
		return nil
	case fence == highest && token == highestToken:
		return nil
	}
	return &StaleError{Op: op, Resource: resource, Fence: fence, Highest: highest, Tie: fence == highest}
}

// Validate rejects a request that no guard may accept: an empty resource
// name, fence 0 (no backend issues it; it is what an unset fence looks
// like) or an empty token. The error matches dlock.ErrInvalid.
func Validate(resource string, fence uint64, token string) error {
	switch {
	case resource == "":
		return bridge.Invalidf("fence: empty resource name")
	case fence == 0:
		return bridge.Invalidf("fence: %q: fence 0 is not a fence (unset?)", resource)
	case token == "":
		return bridge.Invalidf("fence: %q: empty holder token for fence %d", resource, fence)
	}
	return nil
}
