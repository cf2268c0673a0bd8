package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Sentinel errors. Every error that dlock or a backend returns matches
// exactly one of them with errors.Is, so callers can tell "busy" from
// "gone" from "unreachable" from "fix the setup" from "your mistake". A
// wait that ended with its context also matches the context's error,
// beside the sentinel of its last attempt (ErrNotAcquired or
// ErrUnavailable). The errors that wrap a sentinel add the "dlock: "
// prefix, once.
var (
	// ErrNotAcquired means the lock is held by another owner (or, for a
	// quorum backend, no majority could be gathered in time).
	ErrNotAcquired = errors.New("lock not acquired")

	// ErrNotHeld means the caller's lock is no longer held: it was released,
	// it expired, or another owner holds the key now. An operation that
	// returns it changed nothing on the server.
	ErrNotHeld = errors.New("lock not held")

	// ErrLockLost means the lock may have been lost: its validity ran out
	// before an extension succeeded, or the backend reported the lock's
	// session gone. It is the cause with which Do cancels its function's
	// context, and what a handle declared lost returns from Extend.
	ErrLockLost = errors.New("lock lost")

	// ErrUnavailable means the backend could not be reached or answered
	// with an error that may pass (retrying may help); the outcome of the
	// operation may be unknown.
	ErrUnavailable = errors.New("backend unavailable")

	// ErrMisconfigured means the backend answered, and refused the request
	// for a reason that retrying cannot change until someone fixes the
	// setup: wrong credentials, a missing permission, a key of another type
	// where the lock's belongs, a read-only replica, a server out of
	// memory, a missing schema object. The error carries the server's own
	// reason. Acquire and Do return it at once instead of waiting.
	ErrMisconfigured = errors.New("backend misconfigured")

	// ErrInvalid means a caller's argument or option was rejected before
	// anything was sent to a server, or a semaphore's limit differs from
	// the one its servers recorded (see Semaphore). Waiting cannot change
	// it.
	ErrInvalid = bridge.ErrInvalid
)

// NodeError says which backend node gave which error. Backends wrap server
// and network errors in it, so callers can find the node with errors.As.
type NodeError struct {
	Node string // the node's address or name, as the backend knows it
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %s: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

var sentinels = []error{ErrNotAcquired, ErrNotHeld, ErrLockLost, ErrUnavailable, ErrMisconfigured, ErrInvalid}

// ctxErr is ctx's error and its cause, if any (hiding its sentinels).
func ctxErr(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w (%w)", err, hideSentinels{cause})
}

// message is err's message inside another dlock error: one line, no
// second "dlock: ".
func message(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "dlock: "), "\n", "; ")
}

// opError is an error of operation op on key, with one "dlock: " prefix.
type opError struct {
	op, key string
	err     error
}

func (e *opError) Error() string { return fmt.Sprintf("dlock: %s %q: %s", e.op, e.key, message(e.err)) }
func (e *opError) Unwrap() error { return e.err }

// hideSentinels carries err as the detail of an error whose sentinel
// differs (a loss whose extension was refused): errors.Is finds in it all
// but dlock's sentinels.
type hideSentinels struct{ err error }

func (h hideSentinels) Error() string { return message(h.err) }
func (h hideSentinels) Is(target error) bool {
	return !slices.Contains(sentinels, target) && errors.Is(h.err, target)
}
func (h hideSentinels) As(target any) bool { return errors.As(h.err, target) }
