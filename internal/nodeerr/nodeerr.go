// Package nodeerr makes the errors of calls to a backend's servers, from
// the kind of failure a backend saw (Kind), for every package of this
// repository.
package nodeerr

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// Kind is what a backend makes of a failed call.
type Kind int

const (
	Unreachable Kind = iota // no answer came: the outcome may be unknown
	Answered                // an error that may pass (loading, a busy script)
	// Refused: what only a fix of the setup changes (credentials, ACL
	// permissions, a key of another type, a replica, no memory left, a
	// missing schema object). It matches dlock.ErrMisconfigured.
	Refused
)

// Describe returns err as a node's error saying, on one line, what
// happened: the server's own answer (kept in the chain for errors.As), no
// reply in time, or no connection. A timeout or a cancellation is the
// node's and leaves the chain, so as not to match the caller's context.
func Describe(err error, k Kind) error {
	switch {
	case k == Refused:
		return OneLine(err)
	case k == Answered:
		return fmt.Errorf("the server answered with an error: %w", OneLine(err))
	case errors.Is(err, context.DeadlineExceeded) || IsTimeout(err):
		return errors.New("no reply in time")
	case errors.Is(err, context.Canceled):
		return errors.New("request cancelled")
	}
	return fmt.Errorf("unreachable: %w", OneLine(err))
}

// Error returns the error of an operation whose call to node failed with
// err, of kind k. It matches exactly one of dlock's sentinels:
//
//   - dlock.ErrMisconfigured for a refusal, whatever the context;
//   - when ctx ended (or its deadline passed), dlock.ErrNotAcquired for an
//     acquisition and dlock.ErrUnavailable otherwise, and ctx's error too;
//   - dlock.ErrUnavailable otherwise.
//
// details (a backend's own errors, such as pglock.ErrNotMigrated) follow
// the sentinel, then comes a *dlock.NodeError naming node, with err as
// Describe gives it.
func Error(ctx context.Context, node string, err error, k Kind, acquiring bool, details ...error) error {
	ne := &dlock.NodeError{Node: node, Err: Describe(err, k)}
	chain := []any{dlock.ErrUnavailable}
	if k == Refused {
		chain[0] = dlock.ErrMisconfigured
	} else if cerr := CtxErr(ctx); cerr != nil {
		if acquiring {
			chain[0] = dlock.ErrNotAcquired
		}
		chain = append(chain, cerr)
	}
	for _, d := range details {
		chain = append(chain, d)
	}
	chain = append(chain, ne)
	return fmt.Errorf(strings.Repeat("%w: ", len(chain)-1)+"%w", chain...)
}

// CtxErr is ctx.Err(), counting a deadline passed whose timer has not
// fired yet: a socket deadline, the context's, may time out a read first.
func CtxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// IsTimeout reports whether err is a network timeout.
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// OneLine returns err with its message on one line, keeping its chain
// (pgx puts each address it tried on a line of its own).
func OneLine(err error) error {
	if !strings.ContainsAny(err.Error(), "\r\n") {
		return err
	}
	return lineErr{err}
}

type lineErr struct{ err error }

func (e lineErr) Unwrap() error { return e.err }

func (e lineErr) Error() string {
	var b strings.Builder
	for _, line := range strings.FieldsFunc(e.err.Error(), func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case b.Len() == 0:
		case strings.HasSuffix(b.String(), ":"):
			b.WriteByte(' ')
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}

// IsNil reports whether v, a constructor's client or handle, is nil or a
// typed nil (which would panic on first use).
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return r.IsNil()
	}
	return false
}
