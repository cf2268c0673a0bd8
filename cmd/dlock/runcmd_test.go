package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// treeCommands are commands whose processes are not all dlock's direct
// child: each starts the test binary as "hold" with the ready files
// dir/0 and dir/1, so that the test learns every pid.
func treeCommands(dir string) []struct{ name, shell string } {
	self := shellQuote(childArgv()[0])
	f0, f1 := shellQuote(filepath.Join(dir, "0")), shellQuote(filepath.Join(dir, "1"))
	return []struct{ name, shell string }{
		{"background jobs", fmt.Sprintf("%s hold %s 60s & %s hold %s 60s & wait", self, f0, self, f1)},
		{"pipeline", fmt.Sprintf("%s hold %s 60s | %s hold %s 60s", self, f0, self, f1)},
		{"setsid daemon", fmt.Sprintf("%s spawn %s 60s; %s hold %s 60s", self, f0, self, f1)},
	}
}

// readyPids waits for the ready files dir/0 and dir/1 and returns their
// pids; the processes are SIGKILLed when the test ends, should any survive.
func readyPids(t *testing.T, dir string, p *proc) []int {
	t.Helper()
	var pids []int
	for _, f := range []string{"0", "1"} {
		pid, err := strconv.Atoi(waitFile(t, filepath.Join(dir, f), p))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		t.Cleanup(func() {
			if alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	return pids
}

// living returns the pids that are still running.
func living(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

var panicBuild struct {
	once sync.Once
	path string
	err  error
}

// panicBin is dlock built with the dlock_testpanic tag: it panics when the
// file named by DLOCK_TEST_PANIC_FILE appears.
func panicBin(t *testing.T) string {
	t.Helper()
	panicBuild.once.Do(func() {
		panicBuild.path = filepath.Join(filepath.Dir(dlockBin), "dlock-panic")
		out, err := exec.Command("go", "build", "-tags", "dlock_testpanic", "-o", panicBuild.path, ".").CombinedOutput()
		if err != nil {
			panicBuild.err = fmt.Errorf("go build -tags dlock_testpanic: %v\n%s", err, out)
		}
	})
	if panicBuild.err != nil {
		t.Fatal(panicBuild.err)
	}
	return panicBuild.path
}

// TestRunDeathTakesTheTree: when dlock run dies without cleaning up
// (SIGKILL, as the OOM killer sends it; a panic), every process of its
// command dies with it, not only its direct child: a shell's background
// jobs, both ends of a pipeline, a daemon that left the process group with
// setsid. The next dlock run on the key finds none of them running.
func TestRunDeathTakesTheTree(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	deaths := []struct {
		name string
		bin  func(t *testing.T) string
		kill func(p *proc, trigger string) error
	}{
		{"SIGKILL", func(*testing.T) string { return dlockBin },
			func(p *proc, _ string) error { return p.cmd.Process.Kill() }},
		{"panic", panicBin,
			func(_ *proc, trigger string) error { return os.WriteFile(trigger, nil, 0o644) }},
	}
	for _, death := range deaths {
		for i, c := range treeCommands("DIR") {
			t.Run(death.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				bin := death.bin(t)
				dir := t.TempDir()
				trigger := filepath.Join(dir, "panic")
				env := binEnv("DLOCK_REDIS="+srv.URL(), "DLOCK_TEST_PANIC_FILE="+trigger)
				key := fmt.Sprintf("tree:%s:%d", death.name, i)
				shell := treeCommands(dir)[i].shell

				p := startExe(t, bin, env, "run", "--ttl", "2s", "-c", shell, key)
				pids := readyPids(t, dir, p)
				if err := death.kill(p, trigger); err != nil {
					t.Fatal(err)
				}
				r := p.wait(t)
				died := time.Now()
				if r.code == 0 || r.code == exitLost {
					t.Fatalf("dlock exited %d, want a death; stderr: %s", r.code, r.stderr)
				}

				// The lock outlives the dead dlock by its TTL; the next
				// holder looks for survivors as soon as it has the lock.
				out := filepath.Join(dir, "probe")
				probe := []string{"probe", out}
				for _, pid := range pids {
					probe = append(probe, strconv.Itoa(pid))
				}
				if r := runBin(t, env, runArgs([]string{"--wait", "30s"}, key, probe...)...); r.code != 0 {
					t.Fatalf("the next dlock run: exit %d; stderr: %s", r.code, r.stderr)
				}
				if b, _ := os.ReadFile(out); strings.Contains(string(b), "alive") {
					t.Errorf("the next holder ran beside processes of the dead dlock's command (pids %v; %s):\n%s", pids, c.name, b)
				}
				for deadline := died.Add(10 * time.Second); len(living(pids)) > 0; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("processes %v of the command outlived their dlock by 10s", living(pids))
					}
				}
			})
		}
	}
}

// TestRunExitTakesTheTree: when the command exits, whatever it left
// running (a background job, a daemon in a session of its own) is gone
// by the time dlock exits, since the lock is released then.
func TestRunExitTakesTheTree(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	dir := t.TempDir()
	self := shellQuote(childArgv()[0])
	f0, f1 := shellQuote(filepath.Join(dir, "0")), shellQuote(filepath.Join(dir, "1"))
	shell := fmt.Sprintf("%s hold %s 60s & %s spawn %s 60s; %s await %s %s", self, f0, self, f1, self, f0, f1)
	p := startBin(t, binEnv("DLOCK_REDIS="+srv.URL()), "run", "-c", shell, "leftovers")
	pids := readyPids(t, dir, p)
	if r := p.wait(t); r.code != 0 {
		t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
	}
	if l := living(pids); len(l) > 0 {
		t.Errorf("processes %v the command left behind run on after dlock released the lock and exited", l)
	}
}

// TestRunKillsByValidityEnd: a command that ignores SIGTERM is dead when
// the lock's validity ends, not --grace later: while the backend does not
// answer, dlock starts terminating it --grace before the validity ends,
// and the next holder, granted when the key expires, finds it gone.
func TestRunKillsByValidityEnd(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	proxy := testproxy.Start(t, srv.Addr)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	const ttl, grace = 6 * time.Second, 2 * time.Second
	holder := startBin(t, binEnv(), runArgs([]string{"--redis", "redis://" + proxy.Addr, "--ttl", ttl.String(), "--grace", grace.String()},
		"validity", "hold-ignore", ready, "60s")...)
	pid, _ := strconv.Atoi(waitFile(t, ready, holder))
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	// The holder can no longer extend; the key expires on the server when
	// its TTL runs out.
	proxy.Blackhole(t)
	pttl, err := c.PTTL(context.Background(), "validity").Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL: %v, %v", pttl, err)
	}
	expires := time.Now().Add(pttl)

	out := filepath.Join(dir, "probe")
	next := startBin(t, binEnv("DLOCK_REDIS="+srv.URL()), runArgs([]string{"--wait", "30s"}, "validity", "probe", out, strconv.Itoa(pid))...)
	for alive(pid) && time.Until(expires) > -10*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	died := time.Now()
	t.Logf("the command died %v before the key expired on the server (negative: after)", expires.Sub(died).Round(time.Millisecond))
	if r := next.wait(t); r.code != 0 {
		t.Fatalf("the next holder: exit %d; stderr: %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "dead") {
		t.Errorf("the next holder was granted the lock while the old holder's command still ran: %s", b)
	}
	r := holder.wait(t)
	if r.code != exitLost {
		t.Errorf("holder: exit %d, want %d; stderr: %s", r.code, exitLost, r.stderr)
	}
	if !strings.Contains(r.stderr, "SIGTERM") || !strings.Contains(r.stderr, "SIGKILL") {
		t.Errorf("holder's stderr does not say it sent SIGTERM and SIGKILL: %s", r.stderr)
	}
	humanLines(t, r.stderr)
}

// TestRunExtendsPastGrace: a command that runs for several TTLs, with the
// largest grace allowed (a third of the TTL, to which a larger --grace is
// cut), is left alone: each extension moves the moment termination would
// start.
func TestRunExtendsPastGrace(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	ready := filepath.Join(t.TempDir(), "ready")
	r := runBin(t, binEnv("DLOCK_REDIS="+srv.URL()), runArgs([]string{"--ttl", "3s", "--grace", "1m"}, "extended", "hold", ready, "7s")...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("a command that outlives several TTLs: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
}
