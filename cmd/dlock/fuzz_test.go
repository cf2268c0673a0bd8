package main

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fuzzCommands are the commands FuzzRun drives. demo is left out: it
// starts servers of its own.
var fuzzCommands = []string{"run", "acquire", "extend", "release", "inspect", "help", "--help", "--version", "no-such-command"}

// FuzzRun: dlock's in-process entry point, given any arguments, never
// panics, ends quickly (or, waiting for the lock, when its context ends),
// and exits with a documented code and, on failure,
// a one-line message that never shows the backend's password. The backend
// is a local listener that hangs up on every connection, so no command can
// take a lock: a run's command never starts (no 126, 127 or its own
// status), and nothing is busy (75) or lost (76). Arguments naming another
// backend are skipped: they would reach real servers. cmd picks the
// command (and, from 128 on, PostgreSQL as the backend); the arguments
// after it are NUL-separated. Seeds: testdata/fuzz/FuzzRun.
func FuzzRun(f *testing.F) {
	redisURL, pgDSN := hangUp(f)
	const secret = "s3cr3tpw"
	f.Fuzz(func(t *testing.T, cmd uint8, rest string) {
		args := []string{fuzzCommands[int(cmd)%len(fuzzCommands)]}
		if rest != "" {
			args = append(args, strings.Split(rest, "\x00")...)
		}
		for _, a := range args {
			if l := strings.ToLower(a); strings.Contains(l, "--redis") || strings.Contains(l, "--postgres") {
				t.Skip("names a backend of its own")
			}
		}
		env := []string{"DLOCK_REDIS=" + redisURL}
		if cmd >= 128 {
			env = []string{"DLOCK_POSTGRES=" + pgDSN}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		start := time.Now()
		exited := make(chan int, 1)
		go func() { exited <- run(ctx, args, env, strings.NewReader(""), &stdout, &stderr) }()
		var code int
		select {
		case code = <-exited:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("dlock %q hangs past its context's end:\n%s", args, buf[:runtime.Stack(buf, true)])
		}
		// A wait (--wait) goes on through an unreachable backend, until
		// the context ends; anything else ends at once.
		if d := time.Since(start); d > 4*time.Second && ctx.Err() == nil {
			t.Errorf("dlock %q took %v", args, d)
		}
		switch code {
		case exitOK, exitUsage, exitUnavailable:
		default:
			t.Fatalf("dlock %q: exit %d, want 0, 64 or 69 with a backend that hangs up; stderr: %q", args, code, stderr.String())
		}
		if code != exitOK {
			if msg := stderr.String(); strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
				t.Fatalf("dlock %q: exit %d, stderr not one line: %q", args, code, msg)
			}
		}
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Fatalf("dlock %q printed the password: %q %q", args, stdout.String(), stderr.String())
		}
	})
}

// hangUp starts a listener that closes every connection at once, and
// returns a Redis URL and a PostgreSQL DSN for it, both with the password
// "s3cr3tpw". Owning the port keeps anyone else's server off it.
func hangUp(tb testing.TB) (redisURL, pgDSN string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
	})
	addr := ln.Addr().String()
	return "redis://:s3cr3tpw@" + addr, "postgres://app:s3cr3tpw@" + addr + "/db?connect_timeout=2"
}

// FuzzShellQuote: what acquire prints is meant for eval, so for any key a
// POSIX shell that evals DLOCK_KEY=<shellQuote(key)> gets the key back,
// byte for byte, and runs nothing else. (NUL cannot be in a shell word,
// nor in the command line that gave the key.)
func FuzzShellQuote(f *testing.F) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if strings.ContainsRune(key, 0) {
			t.Skip("NUL")
		}
		out, err := exec.Command(sh, "-c", `eval "DLOCK_KEY=$1" && printf %s "$DLOCK_KEY"`, "sh", shellQuote(key)).Output()
		if err != nil || string(out) != key {
			t.Fatalf("eval DLOCK_KEY=%s gave %q (%v), want %q", shellQuote(key), out, err, key)
		}
	})
}
