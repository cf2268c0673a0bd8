package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

// lockFlags are the flock(1)-style flags of the commands that take a lock:
// -t/--ttl, -w/--wait, -n/--nb/--nonblock, -E/--conflict-exit-code,
// -q/--quiet, --verbose and, where a semaphore makes sense, --limit.
// Every command maps a busy lock through busy,
// so -E and -q mean the same thing everywhere.
type lockFlags struct {
	ttl      time.Duration
	wait     time.Duration // forever: no limit
	nonblock bool
	conflict int
	quiet    bool
	verbose  bool
	limit    int // --limit: a semaphore of that many permits; 0: a lock
}

// addLimit adds --limit, which makes KEY a semaphore.
func (l *lockFlags) addLimit(cmd *cobra.Command) {
	cmd.Flags().IntVar(&l.limit, "limit", 0, "a semaphore: admit up to `N` holders of KEY at once, each on one of its N\nslots (DLOCK_SLOT; DLOCK_KEY is the slot's key, {KEY}#SLOT)")
}

// locker is the Locker to take KEY with: l, or with --limit a semaphore
// of l.
func (l *lockFlags) locker(be dlock.Locker) dlock.Locker {
	if l.limit == 0 {
		return be
	}
	return dlock.Semaphore(be, l.limit)
}

func (l *lockFlags) addTTL(cmd *cobra.Command, usage string) {
	l.ttl = 30 * time.Second
	cmd.Flags().VarP(seconds{d: &l.ttl}, "ttl", "t", usage+"\n(seconds, such as 30 or 0.5, or a duration such as 1m30s)")
}

func (l *lockFlags) addWait(cmd *cobra.Command) {
	f := cmd.Flags()
	f.VarP(seconds{d: &l.wait, orForever: true}, "wait", "w",
		"how long to wait while the lock is busy: seconds (5, 0.5), a duration (1m30s),\nor forever (no limit); 0 tries once")
	f.BoolVarP(&l.nonblock, "nonblock", "n", false, "fail at once if the lock is busy (same as --wait 0); --nb too, as in flock")
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "nb" { // flock's long spelling of -n
			name = "nonblock"
		}
		return pflag.NormalizedName(name)
	})
	f.IntVarP(&l.conflict, "conflict-exit-code", "E", exitBusy, "exit `N` instead of 75 when the lock is busy")
	f.BoolVarP(&l.quiet, "quiet", "q", false, "print nothing when the lock is busy (other errors still print)")
	f.BoolVar(&l.verbose, "verbose", false, "once the lock is granted, say on stderr how long it waited, its fence, the\nbackend and the holder record")
}

// check validates the flags and applies -n.
func (l *lockFlags) check(cmd *cobra.Command) error {
	if l.nonblock {
		if cmd.Flags().Changed("wait") && l.wait != 0 {
			return usagef("-n and --wait %s contradict each other", waitString(l.wait))
		}
		l.wait = 0
	}
	if l.conflict < 0 || l.conflict > 255 {
		return usagef("--conflict-exit-code %d: must be within 0..255", l.conflict)
	}
	if cmd.Flags().Changed("limit") {
		if bridge.CheckLimit(l.limit) != nil {
			return usagef("--limit %d: must be between 1 and %d", l.limit, bridge.MaxLimit)
		}
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

// forever is --wait forever: no limit.
const forever = time.Duration(math.MaxInt64)

// seconds is a duration flag that takes what flock(1) takes, plain seconds
// ("5", "0.5"), as well as a Go duration ("1m30s"); with orForever, also
// "forever".
type seconds struct {
	d         *time.Duration
	orForever bool
}

func (s seconds) Type() string   { return "duration" }
func (s seconds) String() string { return waitString(*s.d) }

func (s seconds) Set(v string) error {
	d, err := parseSeconds(v, s.orForever)
	if err == nil {
		*s.d = d
	}
	return err
}

func parseSeconds(v string, orForever bool) (time.Duration, error) {
	if orForever && v == "forever" {
		return forever, nil
	}
	if strings.Trim(v, "-.0123456789") == "" { // not 1e3, 0x1p-2, Inf or NaN
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			if math.Abs(f) >= float64(math.MaxInt64)/1e9 {
				return 0, errors.New("out of range")
			}
			return time.Duration(math.Round(f * 1e9)), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	if orForever {
		return 0, errors.New(`want seconds (5, 0.5), a duration (1m30s) or forever`)
	}
	return 0, errors.New(`want seconds (30, 0.5) or a duration (1m30s)`)
}

// waitString formats a duration of the flags: 0 is "0", forever "forever".
func waitString(d time.Duration) string {
	switch d {
	case 0:
		return "0"
	case forever:
		return "forever"
	}
	return d.String()
}
