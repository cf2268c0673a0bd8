package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// lockFlags are the flock(1)-style flags of the commands that take a lock:
// -t/--ttl, -w/--wait, -n, -E/--conflict-exit-code and -q/--quiet. Every
// command maps a busy lock through busy, so -E and -q mean the same thing
// everywhere.
type lockFlags struct {
	ttl      time.Duration
	wait     time.Duration
	nonblock bool
	conflict int
	quiet    bool
}

func (l *lockFlags) addTTL(cmd *cobra.Command, usage string) {
	cmd.Flags().DurationVarP(&l.ttl, "ttl", "t", 30*time.Second, usage)
}

func (l *lockFlags) addWait(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVarP(&l.wait, "wait", "w", 0, "how long to wait while the lock is busy; 0 tries once")
	f.BoolVarP(&l.nonblock, "nonblock", "n", false, "fail at once if the lock is busy (same as --wait 0)")
	f.IntVarP(&l.conflict, "conflict-exit-code", "E", exitBusy, "exit `N` instead of 75 when the lock is busy")
	f.BoolVarP(&l.quiet, "quiet", "q", false, "print nothing when the lock is busy (other errors still print)")
}

// check validates the flags and applies -n.
func (l *lockFlags) check(cmd *cobra.Command) error {
	if l.nonblock {
		if cmd.Flags().Changed("wait") && l.wait != 0 {
			return usagef("-n and --wait %v contradict each other", l.wait)
		}
		l.wait = 0
	}
	if l.conflict < 0 || l.conflict > 255 {
		return usagef("--conflict-exit-code %d: must be within 0..255", l.conflict)
	}
	return nil
}

// busy gives a busy lock's error the exit code of -E, and silences it with
// -q; any other error passes unchanged.
func (l *lockFlags) busy(err error) error {
	var be *busyError
	if !errors.As(err, &be) {
		return err
	}
	out := &exitError{code: l.conflict, err: be.err}
	if l.quiet {
		out.err = nil
	}
	return out // code 0 with a message (-E 0 without -q) prints it and exits 0
}

// busyError is a lock held by another owner (exit 75 unless -E). It is a
// type of its own so that a command of run that exits 75 keeps its status.
type busyError struct{ err error }

func (e *busyError) Error() string { return e.err.Error() }
func (e *busyError) Unwrap() error { return e.err }

func busyf(format string, args ...any) error {
	return &busyError{err: fmt.Errorf(format, args...)}
}
