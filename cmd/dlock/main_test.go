package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// dlockBin is the real binary, built once for the tests that run it.
var dlockBin string

// childEnv marks the test binary as started as a command under dlock run:
// TestMain then plays one of the child roles below instead of testing.
const childMarker = "DLOCK_TEST_CHILD"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2:])) // under an in-process dlock run
	}
	if os.Getenv(childMarker) == "1" {
		os.Exit(child(os.Args[1:]))
	}
	if testsrv.FuzzWorker() {
		goleak.VerifyTestMain(m) // FuzzRun needs no binary
		return
	}
	dir, err := os.MkdirTemp("", "dlock-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", dlockBin}
	if raceEnabled {
		args = append(args, "-race") // catch races in the binary's own goroutines too
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// child is what the test binary does when dlock run starts it:
//
//	record FILE DUR        append "enter NANOS FENCE", sleep DUR, append "exit NANOS"
//	env                    print DLOCK_KEY, DLOCK_TOKEN, DLOCK_FENCE, DLOCK_SLOT
//	exit N                 exit with status N
//	hold READY DUR         write our pid to READY, sleep DUR (SIGTERM kills)
//	hold-ignore READY DUR  the same, ignoring SIGTERM
//	hold-trap READY DUR OUT  the same; on SIGTERM append "TERM" to OUT and exit 7
//	cat                    copy stdin to stdout
//	spawn READY DUR        start "hold READY DUR" in a session of its own
//	                       (a daemon that left the group) and exit at once
//	await FILE...          wait until every FILE exists
//	probe OUT PID...       append "PID alive" or "PID dead" to OUT for each PID
//	lead OUT GO            append "DLOCK_TERM DLOCK_LEADER DLOCK_FENCE" to OUT,
//	                       then wait until GO exists
func child(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "child: no role")
		return 2
	}
	switch args[0] {
	case "record":
		d, _ := time.ParseDuration(args[2])
		appendLine(args[1], fmt.Sprintf("enter %d %s", time.Now().UnixNano(), os.Getenv("DLOCK_FENCE")))
		time.Sleep(d)
		appendLine(args[1], fmt.Sprintf("exit %d", time.Now().UnixNano()))
	case "env":
		for _, k := range []string{"DLOCK_KEY", "DLOCK_TOKEN", "DLOCK_FENCE", "DLOCK_SLOT"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "hold", "hold-ignore", "hold-trap":
		d, _ := time.ParseDuration(args[2])
		term := make(chan os.Signal, 1)
		switch args[0] {
		case "hold-ignore":
			signal.Ignore(syscall.SIGTERM)
		case "hold-trap":
			signal.Notify(term, syscall.SIGTERM)
		}
		tmp := args[1] + ".tmp"
		os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.Rename(tmp, args[1]) // appears complete or not at all
		select {
		case <-time.After(d):
		case <-term:
			appendLine(args[3], "TERM")
			return 7
		}
	case "spawn":
		cmd := exec.Command(childArgv()[0], "hold", args[1], args[2])
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "child spawn:", err)
			return 2
		}
	case "await":
		for _, f := range args[1:] {
			for {
				if _, err := os.Stat(f); err == nil {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	case "probe":
		var b strings.Builder
		for _, p := range args[2:] {
			pid, _ := strconv.Atoi(p)
			state := "dead"
			if alive(pid) {
				state = "alive"
			}
			fmt.Fprintf(&b, "%d %s\n", pid, state)
		}
		appendLine(args[1], strings.TrimSuffix(b.String(), "\n"))
	case "lead":
		appendLine(args[1], strings.Join([]string{os.Getenv("DLOCK_TERM"), os.Getenv("DLOCK_LEADER"), os.Getenv("DLOCK_FENCE")}, " "))
		return child([]string{"await", args[2]})
	case "cat":
		var b bytes.Buffer
		b.ReadFrom(os.Stdin)
		os.Stdout.Write(b.Bytes())
	default:
		fmt.Fprintf(os.Stderr, "child: unknown role %q\n", args[0])
		return 2
	}
	return 0
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	f.WriteString(line + "\n") // one write: O_APPEND keeps lines whole
}

// childArgv is the command line that makes dlock run start the test binary
// in a child role.
func childArgv(role ...string) []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return append([]string{exe}, role...)
}

// binEnv is the environment for the binary: ours without any DLOCK_
// settings, plus the child marker and extra.
func binEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLOCK_") {
			env = append(env, kv)
		}
	}
	// Race-enabled binaries otherwise sleep 1s at exit.
	return append(append(env, childMarker+"=1", "GORACE=atexit_sleep_ms=0"), extra...)
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// proc is a running dlock binary.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer // read while it runs, too
	start          time.Time
	done           chan struct{}
	res            result
}

// startBin starts the binary with env (see binEnv) and args.
func startBin(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startExe(t, dlockBin, env, args...)
}

// startExe starts the binary bin (a build of dlock) with env and args.
func startExe(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// A process that outlived dlock and holds its output open must not
	// hide dlock's own exit.
	p.cmd.WaitDelay = 5 * time.Second
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		p.cmd.Wait()
		p.res = result{code: p.cmd.ProcessState.ExitCode(), stdout: p.stdout.String(), stderr: p.stderr.String(), elapsed: time.Since(p.start)}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.res.code = 128 + int(ws.Signal())
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the binary to exit, failing the test after 60s.
func (p *proc) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("dlock %q did not exit within 60s; stderr: %s", p.cmd.Args[1:], p.res.stderr)
		return result{}
	}
}

// outSoFar is what the binary printed on stdout so far.
func (p *proc) outSoFar() string { return p.stdout.String() }

// runBin runs the binary to completion.
func runBin(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return startBin(t, env, args...).wait(t)
}

// waitFile waits for path to exist (a child signals it is running by
// writing it) and returns its content.
func waitFile(t *testing.T, path string, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("dlock exited %d before %s appeared; stderr: %s", p.res.code, path, p.res.stderr)
			default:
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within 20s", path)
	return ""
}

// startHolding starts the binary as `dlock run ARGS... -c ... KEY`, whose
// command prints its lock's variables (the child role "env") and then
// holds the lock until finish; it returns once the command runs. finish
// lets the command exit 0, and returns dlock's result.
func startHolding(t *testing.T, key string, args ...string) (p *proc, finish func() result) {
	t.Helper()
	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	self := shellQuote(childArgv()[0])
	shell := fmt.Sprintf("%s env; : > %s; exec %s await %s", self, shellQuote(ready), self, shellQuote(goOn))
	p = startBin(t, binEnv(), append(append([]string{"run"}, args...), "-c", shell, key)...)
	waitFile(t, ready, p)
	return p, func() result {
		t.Helper()
		if err := os.WriteFile(goOn, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p.wait(t)
	}
}

// runInProcess calls run with env and returns its code and output.
func runInProcess(t *testing.T, env []string, args ...string) result {
	t.Helper()
	var stdout, stderr lockedBuffer
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, args, env, nil, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
}

// lockedBuffer collects what several goroutines write: dlock's own lines,
// and its command's output, which exec copies in from a pipe. (A
// bytes.Buffer, whose ReadFrom holds on to its end while the command
// runs, would drop dlock's lines written meanwhile.)
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// oneLine checks that stderr is exactly one line.
func oneLine(t *testing.T, stderr string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not one line: %q", stderr)
	}
}

// humanLines checks that every line dlock printed on stderr is one of its
// own, "dlock ...: ...", not a log record of the library (logfmt, or the
// default logger's "2006/01/02 15:04:05 WARN ...").
func humanLines(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if !strings.HasPrefix(line, "dlock") || strings.Contains(line, "level=") || strings.Contains(line, "msg=") {
			t.Errorf("stderr has a line that is not dlock's own: %q\nall of it:\n%s", line, stderr)
		}
	}
}
