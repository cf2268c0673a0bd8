package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes. The sysexits(3) values are what flock(1) and friends use, so
// scripts can tell "try later" from "fix your setup".
const (
	exitOK            = 0
	exitFailure       = 1   // anything else that went wrong
	exitNobody        = 3   // leader: nobody leads the election
	exitUsage         = 64  // EX_USAGE: bad flags or arguments
	exitUnavailable   = 69  // EX_UNAVAILABLE: the backend could not be reached
	exitBusy          = 75  // EX_TEMPFAIL: the lock is held and --wait ran out
	exitLost          = 76  // the lock was lost while held, or the token does not hold it
	exitMisconfigured = 78  // EX_CONFIG: the backend refused: fix its setup
	exitCannotExec    = 126 // the command was found but could not be started
	exitNotFound      = 127 // the command was not found
	exitSignalBase    = 128 // + N: the command (or dlock, while waiting) died of signal N
)

// exitCodesHelp is the table that every help text refers to.
const exitCodesHelp = `Exit codes:
  0        success (run: the command exited 0)
  1        other failure
  3        leader: nobody leads the election
  64       usage error: bad flag, argument or backend choice
  69       backend unreachable (or it answered with an error that may pass)
  75       lock busy: another owner held it until --wait ran out
           (elect: another candidate led; -E N exits N instead; -q prints
           nothing for it)
  76       lock lost: run, elect: lost, or not extended in time, while the
           command ran (the command was terminated); extend/release: the
           token no longer holds the lock
  78       backend refused: fix its setup (wrong password or user, missing
           permission, a replica, no memory, no fence sequence); at once,
           whatever --wait
  126      run, elect: the command could not be started
  127      run, elect: the command was not found
  128+N    run, elect: the command died of signal N, or dlock got signal N
           while waiting for the lock
  other    run, elect: the command's own exit status (which may coincide
           with a code above: have the command avoid 64-78 if that matters)`

// version is set at link time (-ldflags "-X main.version=v1.2.3"); without
// it the module version from the build info is used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
		return v
	}
	return "(devel)"
}

// exitError carries an exit code out of a command. A nil err exits quietly
// (a command's own status); otherwise its message goes to stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usageError marks an error as the user's mistake (exit 64).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// app is one invocation of dlock: its environment and standard streams.
type app struct {
	env    []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	redact redactor
	name   string // the command's path ("dlock run"), for the lines it prints
}

// run executes dlock with args (without the program name) and returns the
// exit code. env is the environment (os.Environ form) that backend variables
// are read from and that a child of `dlock run` inherits.
func run(ctx context.Context, args []string, env []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{env: env, stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code, msg := exitUsage, err.Error()
	var ee *exitError
	var ue *usageError
	var be *busyError
	switch {
	case errors.As(err, &be):
		code = exitBusy // a command without -E
	case errors.As(err, &ee):
		code = ee.code
		if ee.err == nil {
			return code
		}
	case errors.As(err, &ue):
	default:
		// Cobra's own errors (unknown command or flag, wrong number of
		// arguments) are usage errors too.
	}
	if code == exitUsage && cmd != nil {
		msg = fmt.Sprintf("%s (see '%s --help')", msg, cmd.CommandPath())
	}
	name := "dlock"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, a.redact.oneLine(msg))
	return code
}

func (a *app) lookupEnv(name string) string {
	for i := len(a.env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(a.env[i], "="); ok && k == name {
			return v
		}
	}
	return ""
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks for shell scripts and cron jobs",
		Long: `dlock takes locks that exclude each other across machines, on one Redis node,
on several independent Redis nodes (Redlock), on an etcd cluster or in
PostgreSQL, and runs commands under them. It is flock(1) for a fleet: a job that
fires on every replica runs on one at a time.

Every lock carries a fencing token (DLOCK_FENCE for a command run under it): a
number that grows with every acquisition of the key, which the protected resource
can use to reject a stale holder's late writes.

Backend (choose one; flags override the environment):
  --redis URL        one URL: a single Redis node; repeated: Redlock across them
                     (each node gets --ttl/10, within 100ms..1s, to answer).
                     host:port, or
                     redis://[[user]:password@]host[:port][/db][?dial_timeout=3s...],
                     rediss:// for TLS, unix:///path/to/socket
  --etcd URL         an etcd cluster: one http://host:2379 (https:// for TLS)
                     per member
  --postgres DSN     a PostgreSQL advisory lock (run and inspect only)
  DLOCK_REDIS        comma-separated Redis URLs, when no backend flag is given
  DLOCK_ETCD         comma-separated etcd URLs, when no backend flag is given
  DLOCK_POSTGRES     a PostgreSQL DSN, when no backend flag is given
Passwords never have to appear on the command line (use the variables) and are
never printed.

` + exitCodesHelp,
		Example: `  # run a nightly job on one replica at a time
  dlock run --redis redis.internal:6379 nightly-billing ./bill.sh

  # hold a lock across several shell commands
  export DLOCK_REDIS=redis://:secret@redis.internal:6379
  lock=$(dlock acquire deploy -t 300) || exit
  eval "$lock"   # sets DLOCK_KEY, DLOCK_TOKEN, DLOCK_FENCE
  ./migrate && dlock extend deploy -t 300 && ./restart   # the token comes from DLOCK_TOKEN
  dlock release deploy

  # in cron: skip silently while the previous run still holds the lock
  */5 * * * * dlock run -n -q -E 0 sync ./sync.sh

  # see who holds what
  dlock inspect 'billing:*'

  # one replica runs the scheduler, the others wait to take over; who leads?
  dlock elect scheduler ./scheduler
  dlock leader -w scheduler

  # watch the failure modes of distributed locks happen, on real servers
  dlock demo`,
		Version:       buildVersion(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("missing command: run, elect, leader, acquire, extend, release, inspect, demo or torture")
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	root.AddCommand(a.runCmd(), a.electCmd(), a.leaderCmd(), a.acquireCmd(), a.extendCmd(), a.releaseCmd(), a.inspectCmd(), a.demoCmd(), a.tortureCmd(), a.tortureWorker())
	return root
}

// redactor replaces secrets (passwords from URLs and DSNs) in everything
// dlock prints about its backend.
type redactor struct{ secrets []string }

func (r *redactor) add(secret string) {
	if secret != "" {
		r.secrets = append(r.secrets, secret)
	}
}

func (r *redactor) string(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

// oneLine redacts msg and folds it onto one line: errors.Join and cobra
// separate their parts with newlines. The library's "dlock: " prefixes go
// (the line has one already), not the end of "redlock: ".
func (r *redactor) oneLine(msg string) string {
	msg = libraryPrefix.ReplaceAllString(r.string(msg), "")
	return strings.Join(strings.Fields(msg), " ")
}

var libraryPrefix = regexp.MustCompile(`\bdlock: `)

// signalCode is the exit code for death by a signal, as shells report it.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitFailure
}
