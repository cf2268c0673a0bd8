package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dlock-go/dlock"
)

// labelWidth aligns result values in one column.
const labelWidth = 58

// printer writes the narration and keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format, a...)
}

// section is one scenario's output and the checks that failed in it.
type section struct {
	p        *printer
	failures []string
}

// say prints a line of narration.
func (s *section) say(format string, a ...any) {
	if format == "" {
		s.p.printf("\n")
		return
	}
	s.p.printf("   "+format+"\n", a...)
}

// result prints an outcome in the aligned column and checks it: when ok is
// false the line says FAILED and what the scenario expected.
func (s *section) result(label, got string, ok bool, want string) {
	line := "   " + pad(label+":", labelWidth) + " " + got
	if !ok {
		line += "   <- FAILED, expected " + want
		s.failures = append(s.failures, fmt.Sprintf("%s: got %s, expected %s", label, got, want))
	}
	s.p.printf("%s\n", line)
}

// fail records a failure that is not one printed result (an unexpected
// error).
func (s *section) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	s.failures = append(s.failures, msg)
	s.p.printf("   FAILED: %s\n", msg)
}

func pad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat(" ", n-len(s))
}

// errName names an error by the dlock sentinel it matches, which is what
// the scenarios talk about.
func errName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err.Error()
	case errors.Is(err, dlock.ErrNotAcquired):
		return "ErrNotAcquired"
	case errors.Is(err, dlock.ErrNotHeld):
		return "ErrNotHeld"
	case errors.Is(err, dlock.ErrLockLost):
		return "ErrLockLost"
	case errors.Is(err, dlock.ErrUnavailable):
		return "ErrUnavailable"
	case errors.Is(err, dlock.ErrInvalid):
		return "ErrInvalid"
	}
	return err.Error()
}

// outcome is how a result line shows an operation that either succeeds or
// fails with a sentinel: "ok" / "refused (ErrNotHeld)".
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return "refused (" + errName(err) + ")"
}

func yesNo(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
