package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

// forwardedSignals reach the command's process group while it runs; before
// it starts they end the wait for the lock.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runFlags are the flags of the commands that run a command under a lock:
// run and elect.
type runFlags struct {
	bf       backendFlags
	lf       lockFlags
	grace    time.Duration
	noHolder bool
	shellCmd string
}

func (a *app) runCmd() *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] KEY [flags] [--] COMMAND [ARG]... | run [flags] -c SHELL-COMMAND KEY",
		Short: "Run a command while holding a lock",
		Long: `Run takes the lock on KEY, runs COMMAND while holding it, and releases it when
COMMAND exits. Two dlock run on the same KEY, on any machines that share the
backend, never run their commands at the same time (but see the limits below).
As with flock, dlock's flags end at COMMAND, whose own flags follow it; "--"
before COMMAND ends them too, and is needed only when COMMAND's arguments hold
a "--" (in "dlock run a b -- c" it is ambiguous).

With --wait 0 (the default, or -n, --nb) run tries once and exits 75 if the lock
is busy (-E N: exits N instead; -q: says nothing about it on stderr); with
seconds (5, 0.5) or a duration (1m30s) it waits up to that long for the holder
to let go, and with forever until it does. A backend that refuses (a wrong
password, a missing permission) exits 78 at once, whatever --wait. An
unreachable backend exits 69 at once, or when --wait runs out for one that does
not answer (a single try takes at most the URL's dial_timeout + read_timeout,
5s + 3s by default, whatever it sends, or the DSN's connect_timeout, or 5s on
etcd); with --wait forever dlock keeps trying.
--verbose says on stderr, once the lock is granted, how long dlock waited, the
fence, the backend and the holder record.

The command gets DLOCK_KEY, DLOCK_TOKEN and DLOCK_FENCE in its environment.
DLOCK_FENCE grows with every acquisition of KEY: pass it to the resource you
protect so it can reject the late writes of a holder that lost the lock.

With --limit N, KEY is a semaphore: up to N commands run at once, each holding
one of its N slots. The command gets DLOCK_SLOT too (0 to N-1), and DLOCK_KEY
is its slot's key, {KEY}#SLOT; DLOCK_FENCE grows with every holder of that
slot, so key the resource's fence check by DLOCK_KEY. The backend records the
limit while permits are held: a run with another --limit exits 64 ("limit
conflict: the server has 5, this Locker 10") until they are all released, or
the limit is changed (dlock.SetLimit). The
command's stdin, stdout and stderr are dlock's. It runs in its own process group;
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are
forwarded to that group.

Nothing the command starts outlives the lock. dlock runs it under a small
supervising process (dlock's own binary, "dlock run-supervisor" in ps), which
on Linux is the subreaper of everything the command starts: a daemon that
calls setsid, or a process whose parent exited, stays within its reach. When
the command exits, whatever it left running is killed (SIGKILL) before the
lock is released. When dlock itself dies (SIGKILL, the OOM killer, a crash),
the supervisor kills the command and everything it started at once; the lock
then expires with its TTL (on PostgreSQL it ends with dlock's session, at
once, so the next holder may start in the milliseconds the kill takes). Out
of reach: processes started for the command outside its tree (systemd-run,
at, ssh, a container runtime) and, should the supervisor itself be killed,
what the command started outside its process group. On other systems than
Linux only the command's process group is killed.

While the command runs, dlock extends the lock each time a third of --ttl has
passed. When an extension is refused (the lock is gone), dlock sends SIGTERM
to the command's process group at once; while the backend does not answer it
keeps trying, and sends SIGTERM when only --grace of the validity is left
(--grace is at most a third of --ttl). SIGKILL, to the command and everything
it started, follows --grace later but never after the validity's end, before
another holder can take the lock; dlock says why on stderr and exits 76.
Otherwise it releases the lock and exits with the command's status: its exit
code, or 128+N if it died of signal N.

What remains: dlock can act only while it runs. If dlock is paused (SIGSTOP,
a frozen VM or machine) past the lock's validity, the command runs on beside
the next holder until dlock resumes. A command whose overlap would corrupt
data must pass DLOCK_FENCE to the resource it writes.

While it runs, dlock publishes who holds the lock for dlock inspect: on Redis
(host, pid, since) in a key of its own that expires with the lock, on etcd as
the lock key's value, on PostgreSQL the lock's name in its session's
application_name, beside the session's pid (--no-holder turns this off). --name
adds a label to that record: the job or service.

` + exitCodesHelp,
		Example: `  # nightly billing runs on one replica at a time; the others exit 75 at once
  dlock run --redis redis.internal:6379 billing ./bill.sh --month=prev

  # wait up to two minutes for the previous run, with a 1-minute lease, and say
  # how long it waited, with which fence
  DLOCK_REDIS=redis://:secret@redis.internal:6379 \
    dlock run -t 60 -w 120 --verbose --name reindexer reindex -- ./reindex.sh

  # Redlock across three independent Redis masters
  dlock run --redis redis://r1:6379 --redis redis://r2:6379 --redis redis://r3:6379 \
    payout -- ./payout.sh

  # a PostgreSQL advisory lock; the command passes the fence on
  dlock run --postgres 'postgres://app@db/app' ledger -- sh -c './post.sh --fence "$DLOCK_FENCE"'

  # etcd: one URL per member of the cluster; the fence is the grant's revision
  dlock run --etcd http://etcd1:2379 --etcd http://etcd2:2379 --etcd http://etcd3:2379 \
    ledger -- sh -c './post.sh --fence "$DLOCK_FENCE"'

  # in cron: skip this run silently (exit 0, nothing on stderr) while the last one
  # is still going; a failure of sync.sh itself keeps its exit code
  */5 * * * * dlock run -n -q -E 0 sync ./sync.sh

  # at most 5 at once against the vendor's API; each knows its slot
  dlock run --limit 5 -w forever vendor-api -- sh -c './sync.sh --conn "$DLOCK_SLOT"'

  # a shell command, as with flock -c
  dlock run -w 1m -c 'pg_dump app | gzip > /backup/app.gz' backup`,
		RunE: func(cmd *cobra.Command, args []string) error { return a.runUnder(cmd, args, &rf, nil) },
	}
	a.addRunFlags(cmd, &rf, "lock lease: how long the lock outlives a dlock that stopped extending it\n(crashed, frozen, cut off)")
	rf.lf.addLimit(cmd)
	return cmd
}

// addRunFlags adds run's flags (and elect's) to cmd; ttl says what --ttl is.
func (a *app) addRunFlags(cmd *cobra.Command, rf *runFlags, ttl string) {
	f := cmd.Flags()
	f.SetInterspersed(false) // at the KEY; splitRunArgs parses on to the command
	addBackendFlags(cmd, &rf.bf)
	cmd.Flags().BoolVar(&rf.bf.createTable, "create-fence-table", false,
		"with --postgres: create the dlock_fence sequence that fences come from if it is\nmissing (needs CREATE rights)")
	rf.lf.addTTL(cmd, ttl)
	rf.lf.addWait(cmd)
	f.StringVarP(&rf.shellCmd, "command", "c", "", "run this shell command with /bin/sh -c, instead of COMMAND [ARG]...")
	rf.grace = 10 * time.Second
	f.Var(seconds{d: &rf.grace}, "grace", "time between SIGTERM and SIGKILL to the command when the lock is lost or\ncannot be extended (seconds or a duration); at most a third of --ttl, and never\npast the validity")
	f.BoolVar(&rf.noHolder, "no-holder", false, "do not publish holder info (host, pid, since; PostgreSQL: the lock's name) for dlock inspect")
	f.StringVar(&rf.bf.name, "name", "", "label the holder record with `NAME` (the job or service), for dlock inspect")
}

// runUnder is run's work, and elect's with e: it parses the KEY and the
// command, takes the lock and runs the command under it.
func (a *app) runUnder(cmd *cobra.Command, args []string, rf *runFlags, e *election) error {
	key, argv, err := splitRunArgs(cmd, args, &rf.shellCmd)
	if err != nil {
		return err
	}
	lf, bf := &rf.lf, &rf.bf
	if err := lf.check(cmd); err != nil {
		return err
	}
	ttl, wait := lf.ttl, lf.wait
	if err := checkDurations(ttl, wait, rf.grace); err != nil {
		return err
	}
	if rf.noHolder && bf.name != "" {
		return usagef("--name and --no-holder contradict each other")
	}
	bf.ttl, bf.holder = ttl, !rf.noHolder
	be, err := a.openBackend(cmd.Context(), cmd, bf, useRun)
	if err != nil {
		return err
	}
	defer be.close()
	// The grace must leave room to extend the lock before it starts (see
	// run).
	r := &runner{a: a, be: be, locker: lf.locker(be.locker), limit: lf.limit, key: key, argv: argv, ttl: ttl, wait: wait, grace: min(rf.grace, ttl/3), elect: e}
	if lf.verbose {
		r.verbose = bf
	}
	return lf.busy(r.run(cmd.Context()))
}

// splitRunArgs splits run's arguments into the KEY and the command, as
// flock(1) does: cobra's parsing stopped at the KEY (the first argument that
// is not a flag); the flags after it are parsed here, up to the command's
// name, so that the command's own flags are its own. "--" ends dlock's flags
// too, and must when the command's arguments hold one: a "--" after the
// command's name may have been meant as dlock's ("dlock run a b -- cmd").
func splitRunArgs(cmd *cobra.Command, args []string, shellCmd *string) (key string, argv []string, err error) {
	self, arg := "dlock "+cmd.Name(), "KEY" // run's words, or elect's
	if cmd.Name() == "elect" {
		arg = "NAME"
	}
	switch {
	case cmd.ArgsLenAtDash() == 0:
		return "", nil, usagef(`missing %s before "--"`, arg)
	case len(args) == 0:
		return "", nil, usagef("missing %[2]s and command: %[1]s %[2]s [--] COMMAND [ARG]... or %[1]s -c 'SHELL COMMAND' %[2]s", self, arg)
	}
	key, fs := args[0], cmd.Flags()
	if err := bridge.CheckKey(key); err != nil {
		return "", nil, &usageError{err: err}
	}
	if err := fs.Parse(args[1:]); err != nil {
		return "", nil, cmd.FlagErrorFunc()(cmd, err)
	}
	if help, _ := fs.GetBool("help"); help {
		return "", nil, pflag.ErrHelp // cobra prints the help
	}
	rest, dash := fs.Args(), fs.ArgsLenAtDash()
	if fs.Changed("command") {
		switch {
		case len(rest) > 0 && dash >= 0:
			return "", nil, usagef(`-c and a command after "--" exclude each other`)
		case len(rest) > 0:
			return "", nil, usagef("expected one %s with -c, got %d arguments: %q", arg, len(args), append([]string{key}, rest...))
		case *shellCmd == "":
			return "", nil, usagef("-c: empty shell command")
		}
		return key, []string{"/bin/sh", "-c", *shellCmd}, nil
	}
	switch i := slices.Index(rest, "--"); {
	case len(rest) == 0 && dash >= 0:
		return "", nil, usagef(`missing command after "--"`)
	case len(rest) == 0:
		return "", nil, usagef("missing command: %s %s [--] COMMAND [ARG]...", self, arg)
	case dash < 0 && i > 0:
		return "", nil, usagef(`expected one %s before "--", got %d arguments: %q (to pass "--" to the command, write %s %s -- COMMAND [ARG]...)`,
			arg, i+1, append([]string{key}, rest[:i]...), self, arg)
	case rest[0] == "":
		return "", nil, usagef("empty command name")
	}
	return key, rest, nil
}

func checkDurations(ttl, wait, grace time.Duration) error {
	if err := bridge.CheckTTL(ttl); err != nil {
		return usagef("--ttl: %w", err)
	}
	if wait < 0 {
		return usagef("--wait %s: must not be negative", waitString(wait))
	}
	if grace < 0 {
		return usagef("--grace %v: must not be negative", grace)
	}
	return nil
}

// runner is one `dlock run`: it waits for the lock, supervises the command
// while the lock is held, and turns the outcome into an exit code.
type runner struct {
	a                *app
	be               *backend
	locker           dlock.Locker // be's, or a semaphore of it (--limit)
	limit            int
	key              string
	argv             []string
	ttl, wait, grace time.Duration
	verbose          *backendFlags // with --verbose: what the holder record says
	begun            time.Time     // when the wait began
	// elect makes it dlock elect's: the lock is the leadership of an
	// election (dlock.Lead), run again after a loss with recampaign.
	elect *election

	mu         sync.Mutex
	entered    bool      // the lock was granted and the command is being started
	terms      int       // the times it was granted
	sup        int       // the command's supervisor while it runs
	waitSig    os.Signal // the signal that ended the wait, if one did
	cancelWait context.CancelCauseFunc

	// Written by hold, read after dlock.Do returned.
	aborted   bool             // granted at the moment the wait ended
	startErr  error            // the command could not be started
	state     *os.ProcessState // how the command ended
	lostCause error            // why the command was terminated, if the lock was lost
}

var errWaitOver = errors.New("--wait ran out")

func (r *runner) run(ctx context.Context) error {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	waitCtx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	r.cancelWait = cancelWait

	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case sig := <-sigs:
				r.signal(sig)
			}
		}
	}()
	defer func() { close(stop); <-done }()

	rec := &recorder{Locker: r.locker}
	r.begun = time.Now()
	// Extend when a third of the TTL has passed, so that a backend that
	// does not answer has another third (at least; the grace is at most a
	// third) to come back before the command is terminated.
	opts := []dlock.Option{dlock.WithExtendThreshold(r.ttl - r.ttl/3)}
	switch r.wait {
	case 0:
		opts = append(opts, dlock.WithRetryCount(0))
	case forever: // until the lock comes, or a signal ends the wait
	default:
		t := time.AfterFunc(r.wait, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.terms == 0 {
				cancelWait(errWaitOver)
			}
		})
		defer t.Stop()
		rec.until = time.Now().Add(r.wait)
	}

	var err error
	if r.elect != nil {
		err = dlock.Lead(waitCtx, rec, r.key, r.ttl, r.hold, append(opts, r.elect.options()...)...)
	} else {
		err = dlock.Do(waitCtx, rec, r.key, r.ttl, r.hold, opts...)
	}
	return r.outcome(err, rec)
}

// signal forwards sig to the command (through its supervisor), or ends the
// wait for the lock if the command has not started.
func (r *runner) signal(sig os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.sup != 0:
		_ = syscall.Kill(r.sup, sig.(syscall.Signal))
	case !r.entered && r.waitSig == nil:
		r.waitSig = sig
		r.cancelWait(fmt.Errorf("interrupted by %v", sig))
	}
}

// hold is the function dlock.Do runs while the lock is held: it runs the
// command under its supervisor and waits for it, or terminates it when the
// lock is lost or about to be.
func (r *runner) hold(ctx context.Context) error {
	lock := dlock.LockFromContext(ctx)
	r.mu.Lock()
	if ctx.Err() != nil {
		// The wait ended (timeout or signal) just as the lock was granted.
		r.aborted = true
		r.mu.Unlock()
		return nil
	}
	r.entered, r.terms = true, r.terms+1
	r.lostCause, r.state = nil, nil // of an earlier term
	if r.verbose != nil {
		r.a.granted(lock, time.Since(r.begun), r.be, r.verbose)
	}
	tty := foregroundTTY(r.a.stdin)
	sup, control, err := r.start(lock, tty, r.elect.env(ctx))
	if err != nil {
		r.startErr = err
		r.mu.Unlock()
		return nil
	}
	r.sup = sup.Process.Pid
	r.mu.Unlock()

	exited := make(chan struct{})
	go func() {
		_ = sup.Wait() // the command's status is the supervisor's
		r.mu.Lock()
		r.sup = 0 // reaped: the pid may be reused
		r.mu.Unlock()
		close(exited)
	}()
	r.watch(ctx, lock, exited, control)
	restoreForeground(tty)
	r.state = sup.ProcessState
	if r.lostCause != nil && r.elect != nil && r.elect.recampaign {
		r.mu.Lock()
		r.entered = false // campaigning again: a signal ends it
		r.mu.Unlock()
	}
	return nil
}

// start starts the command under its supervisor, dlock's own binary (see
// supervise), and returns the supervisor and the write end of its control
// pipe: closing it, or dlock's death, kills every process of the command.
func (r *runner) start(lock *dlock.Lock, tty int, env []string) (*exec.Cmd, *os.File, error) {
	path, err := exec.LookPath(r.argv[0])
	if err != nil {
		return nil, nil, err
	}
	self, err := selfExe()
	if err != nil {
		return nil, nil, fmt.Errorf("dlock's own binary: %w", err)
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	mode := "-"
	if tty >= 0 {
		// Interactive: the command's group takes the terminal, so it can
		// read it and gets Ctrl-C directly.
		mode = "tty"
	}
	sup := exec.Command(self, append([]string{superviseArg, mode, path}, r.argv...)...)
	sup.Args[0] = "dlock" // for ps, instead of /proc/self/exe
	sup.Env = childEnv(r.a.env, lock, env...)
	sup.Stdin, sup.Stdout, sup.Stderr = r.a.stdin, r.a.stdout, r.a.stderr
	sup.ExtraFiles = []*os.File{rd} // controlFD
	// A group of its own: signals sent to dlock's group reach the command
	// once, through dlock.
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only matters when stdio are not files (tests): a process holding a
	// pipe open must not keep dlock waiting.
	sup.WaitDelay = time.Second
	if err := sup.Start(); err != nil {
		wr.Close()
		return nil, nil, err
	}
	return sup, wr, nil
}

// watch waits for the command to exit. When the lock is lost it terminates
// the command at once; when no extension succeeded by the time only --grace
// of the validity is left, it terminates it then. Either way SIGKILL comes
// no later than the end of the validity.
func (r *runner) watch(ctx context.Context, lock *dlock.Lock, exited <-chan struct{}, control *os.File) {
	defer control.Close() // after the command exited: nothing is left to kill
	check := time.NewTimer(time.Until(lock.ValidUntil()) - r.grace)
	defer check.Stop()
	for {
		select {
		case <-exited:
			return
		case <-check.C:
			left := time.Until(lock.ValidUntil())
			if left > r.grace { // extended meanwhile
				check.Reset(left - r.grace)
				continue
			}
			r.lostCause = fmt.Errorf("not extended with %v of its validity left", max(left, 0).Round(time.Millisecond))
			r.a.errorf("%s: lock %q could not be extended, and only %v of its validity is left: sending SIGTERM to the command, SIGKILL at its end",
				r.a.name, r.key, max(left, 0).Round(time.Millisecond))
		case <-ctx.Done():
			if cause := context.Cause(ctx); errors.Is(cause, dlock.ErrLockLost) {
				r.lostCause = cause
				why := strings.TrimPrefix(cause.Error(), dlock.ErrLockLost.Error()+": ")
				r.a.errorf("%s: lock %q lost: %s; sending SIGTERM to the command, SIGKILL in %v",
					r.a.name, r.key, why, r.killDelay(lock).Round(time.Millisecond))
			}
		}
		r.terminate(lock, exited, control)
		return
	}
}

// killDelay is the time between SIGTERM and SIGKILL: --grace, but no more
// than what is left of the lock's validity.
func (r *runner) killDelay(lock *dlock.Lock) time.Duration {
	return max(min(r.grace, time.Until(lock.ValidUntil())), 0)
}

// terminate sends SIGTERM to the command, and SIGKILL to it and everything
// it started (closing the control pipe) after killDelay, unless it exited
// first; the supervisor kills what the command left running either way.
func (r *runner) terminate(lock *dlock.Lock, exited <-chan struct{}, control *os.File) {
	delay := r.killDelay(lock)
	r.signal(syscall.SIGTERM)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		r.a.errorf("%s: the command did not exit within %v of SIGTERM; sending SIGKILL", r.a.name, delay.Round(time.Millisecond))
		control.Close()
		<-exited
	}
}

// outcome maps what happened to an exit code.
func (r *runner) outcome(err error, rec *recorder) error {
	r.mu.Lock()
	waitSig, entered := r.waitSig, r.entered
	r.mu.Unlock()
	switch {
	case waitSig != nil && !entered:
		return exitf(signalCode(waitSig), "interrupted by %v while waiting for lock %q", waitSig, r.key)
	case r.aborted:
		return busyf("lock %q is busy: --wait %s ran out", r.key, waitString(r.wait))
	case !entered:
		return acquireError(err, rec, r.key, r.limit, r.wait)
	case r.startErr != nil:
		code := exitCannotExec
		if errors.Is(r.startErr, exec.ErrNotFound) || errors.Is(r.startErr, os.ErrNotExist) {
			code = exitNotFound
		}
		return exitf(code, "cannot run the command: %v", r.startErr)
	case r.lostCause != nil:
		return &exitError{code: exitLost} // said on stderr when it happened
	case errors.Is(err, dlock.ErrLockLost):
		return exitf(exitLost, "lock %q was lost as the command finished (%v): it may have overlapped another holder", r.key, err)
	case errors.Is(err, dlock.ErrNotHeld):
		return exitf(exitLost, "lock %q was gone when the command finished (it expired or was taken): the command may have overlapped another holder", r.key)
	case r.state == nil:
		return exitf(exitFailure, "the command was stopped: %v", err)
	case err != nil:
		// The command is done and the lock still expires with its TTL.
		r.a.errorf("%s: releasing lock %q: %v (it expires within --ttl %v)", r.a.name, r.key, err, r.ttl)
	}
	if code := exitStatus(r.state); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// exitStatus reports a finished process's status as a shell does.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return shellStatus(ws)
	}
	return ps.ExitCode()
}

// childEnv is env with the lock's variables set, and extra ones (NAME=value)
// of the command's.
func childEnv(env []string, lock *dlock.Lock, extra ...string) []string {
	out := make([]string, 0, len(env)+4+len(extra))
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "DLOCK_KEY", "DLOCK_TOKEN", "DLOCK_FENCE", "DLOCK_TERM", "DLOCK_LEADER", "DLOCK_SLOT":
			continue
		}
		out = append(out, kv)
	}
	out = append(out,
		"DLOCK_KEY="+lock.Key(),
		"DLOCK_TOKEN="+lock.Token(),
		"DLOCK_FENCE="+strconv.FormatUint(lock.Fence(), 10))
	if lock.Slot() >= 0 {
		out = append(out, "DLOCK_SLOT="+strconv.Itoa(lock.Slot()))
	}
	return append(out, extra...)
}

// errorf prints one redacted line on stderr.
func (a *app) errorf(format string, args ...any) {
	fmt.Fprintln(a.stderr, a.redact.oneLine(fmt.Sprintf(format, args...)))
}
