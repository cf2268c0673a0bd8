package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// runArgs builds `dlock run [flags] KEY -- <test binary> ROLE...`.
func runArgs(flags []string, key string, role ...string) []string {
	args := append([]string{"run"}, flags...)
	args = append(args, key, "--")
	return append(args, childArgv(role...)...)
}

// TestRunSerializes: dlock run processes started together on one key run
// their commands one at a time, each with a larger fence than the last.
func TestRunSerializes(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	log := filepath.Join(t.TempDir(), "log")
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	const n = 4
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = startBin(t, env, runArgs([]string{"--wait", "30s", "--ttl", "2s"}, "serial", "record", log, "200ms")...)
	}
	for i, p := range procs {
		if r := p.wait(t); r.code != 0 {
			t.Fatalf("dlock run #%d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
	}

	type span struct {
		enter, exit int64
		fence       uint64
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// Lines come in file order; a command appends "exit" only after its
	// own "enter", so pair each exit with the open enter.
	var spans []span
	open := -1
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "enter":
			if open >= 0 {
				t.Fatalf("a command entered while another was inside:\n%s", b)
			}
			fence, _ := strconv.ParseUint(f[2], 10, 64)
			spans = append(spans, span{enter: ns, fence: fence})
			open = len(spans) - 1
		case "exit":
			if open < 0 {
				t.Fatalf("exit without enter:\n%s", b)
			}
			spans[open].exit = ns
			open = -1
		}
	}
	if len(spans) != n || open >= 0 {
		t.Fatalf("got %d complete runs, want %d:\n%s", len(spans), n, b)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].enter < spans[j].enter })
	for i := 1; i < n; i++ {
		if spans[i].enter < spans[i-1].exit {
			t.Errorf("run %d entered at %d, before run %d exited at %d", i, spans[i].enter, i-1, spans[i-1].exit)
		}
		if spans[i].fence <= spans[i-1].fence {
			t.Errorf("fence %d after fence %d: fences must grow", spans[i].fence, spans[i-1].fence)
		}
	}
}

// TestRunBusy: --wait 0 on a held key exits 75 without running the
// command; --wait D exits 75 after about D; a release during the wait lets
// the waiter run.
func TestRunBusy(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	l, err := redislock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := l.TryAcquire(ctx, "busy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")

	r := runBin(t, env, runArgs(nil, "busy", "record", marker, "0s")...)
	if r.code != exitBusy {
		t.Fatalf("--wait 0 on a busy key: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
	}
	oneLine(t, r.stderr)
	if !strings.Contains(r.stderr, "busy") {
		t.Errorf("stderr %q does not say the lock is busy", r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the lock was busy")
	}

	r = runBin(t, env, runArgs([]string{"--wait", "700ms"}, "busy", "record", marker, "0s")...)
	if r.code != exitBusy {
		t.Fatalf("--wait 700ms on a busy key: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
	}
	if r.elapsed < 700*time.Millisecond || r.elapsed > 10*time.Second {
		t.Errorf("--wait 700ms gave up after %v", r.elapsed)
	}

	p := startBin(t, env, runArgs([]string{"--wait", "30s"}, "busy", "record", marker, "0s")...)
	time.Sleep(300 * time.Millisecond) // let it start waiting; the check below holds either way
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := p.wait(t); r.code != 0 {
		t.Fatalf("waiter after release: exit %d; stderr: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the waiting command did not run after the release")
	}
	t.Logf("waiter ran %v after the release", time.Since(released))
}

// TestRunLostLock: when the lock is taken away behind dlock's back, the
// command is terminated (SIGTERM, or SIGKILL after --grace when it ignores
// SIGTERM; the TTL leaves room for all of it), the new holder's key is
// left alone, and dlock exits 76.
func TestRunLostLock(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	ctx := context.Background()
	cases := []struct {
		name  string
		role  string
		steal func(key string) error
		kill  bool // the command ignores SIGTERM, so only SIGKILL ends it
	}{
		{"key deleted, command obeys SIGTERM", "hold",
			func(key string) error { return c.Del(ctx, key).Err() }, false},
		{"key taken by another owner, command ignores SIGTERM", "hold-ignore",
			func(key string) error { return c.Set(ctx, key, "another-owner", time.Minute).Err() }, true},
	}
	const grace = 1500 * time.Millisecond
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("lost:%d", i)
			ready := filepath.Join(t.TempDir(), "ready")
			p := startBin(t, env, runArgs([]string{"--ttl", "6s", "--grace", grace.String()}, key, tc.role, ready, "60s")...)
			pid, _ := strconv.Atoi(waitFile(t, ready, p))
			stolen := time.Now()
			if err := tc.steal(key); err != nil {
				t.Fatal(err)
			}
			r := p.wait(t)
			if r.code != exitLost {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitLost, r.stderr)
			}
			if !strings.Contains(r.stderr, "lost") || !strings.Contains(r.stderr, "SIGTERM") {
				t.Errorf("stderr %q does not say the lock was lost and the command terminated", r.stderr)
			}
			humanLines(t, r.stderr)
			if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
				t.Errorf("the command (pid %d) is still alive after dlock exited: %v", pid, err)
			}
			sinceSteal := time.Since(stolen)
			if tc.kill {
				if !strings.Contains(r.stderr, "sending SIGKILL") {
					t.Errorf("stderr %q does not mention SIGKILL", r.stderr)
				}
				if sinceSteal < grace {
					t.Errorf("a command that ignores SIGTERM ended %v after the loss, before --grace %v", sinceSteal, grace)
				}
				if got, _ := c.Get(ctx, key).Result(); got != "another-owner" {
					t.Errorf("the new owner's lock holds %q: dlock touched it", got)
				}
			} else if strings.Contains(r.stderr, "sending SIGKILL") {
				t.Errorf("SIGKILL announced for a command that obeys SIGTERM: %q", r.stderr)
			}
			// Detection takes a third of the TTL; termination is quick.
			if limit := 10 * time.Second; sinceSteal > limit {
				t.Errorf("dlock needed %v after the loss to end", sinceSteal)
			}
		})
	}
}

// TestRunSignals: SIGTERM to dlock reaches the command, whose status
// becomes dlock's; a signal while waiting for the lock ends the wait.
func TestRunSignals(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	dir := t.TempDir()
	ready, out := filepath.Join(dir, "ready"), filepath.Join(dir, "out")

	p := startBin(t, env, runArgs(nil, "signals", "hold-trap", ready, "60s", out)...)
	waitFile(t, ready, p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t)
	if r.code != 7 {
		t.Fatalf("exit %d, want the command's 7; stderr: %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != "TERM\n" {
		t.Fatalf("the command recorded %q, want TERM", b)
	}

	// Hold the key, so the next dlock waits, and interrupt the wait.
	ready2 := filepath.Join(dir, "ready2")
	holder := startBin(t, env, runArgs(nil, "signals", "hold", ready2, "60s")...)
	waitFile(t, ready2, holder)
	marker := filepath.Join(dir, "ran")
	waiter := startBin(t, env, runArgs([]string{"--wait", "60s"}, "signals", "record", marker, "0s")...)
	time.Sleep(300 * time.Millisecond)
	waiter.cmd.Process.Signal(syscall.SIGINT)
	if r := waiter.wait(t); r.code != 128+int(syscall.SIGINT) {
		t.Fatalf("SIGINT while waiting: exit %d, want %d; stderr: %s", r.code, 128+int(syscall.SIGINT), r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the wait was interrupted")
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	if r := holder.wait(t); r.code != 128+int(syscall.SIGTERM) {
		t.Fatalf("holder after SIGTERM: exit %d, want %d (the command died of SIGTERM)", r.code, 128+int(syscall.SIGTERM))
	}

	// A dlock killed outright takes its command with it (Linux).
	ready3 := filepath.Join(dir, "ready3")
	victim := startBin(t, env, runArgs(nil, "signals", "hold", ready3, "60s")...)
	pid, _ := strconv.Atoi(waitFile(t, ready3, victim))
	victim.cmd.Process.Kill()
	victim.wait(t)
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) != syscall.ESRCH {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) outlived its SIGKILLed dlock", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunStatusAndStdio: the command's exit status and death by a signal
// propagate through the real binary, and stdin/stdout pass through.
func TestRunStatusAndStdio(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	if r := runBin(t, env, runArgs(nil, "status", "exit", "42")...); r.code != 42 {
		t.Errorf("exit 42: dlock exits %d; stderr: %s", r.code, r.stderr)
	}
	if r := runBin(t, env, "run", "status", "--", "/bin/sh", "-c", "kill -KILL $$"); r.code != 128+9 {
		t.Errorf("command killed by SIGKILL: dlock exits %d, want 137; stderr: %s", r.code, r.stderr)
	}
	cmd := exec.Command(dlockBin, runArgs(nil, "status", "cat")...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader("through the lock\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "through the lock\n" {
		t.Errorf("cat under dlock: %q, %v", out, err)
	}
}

// TestRunFenceGrows: each run's command sees the key, a fresh token and a
// fence larger than the previous run's.
func TestRunFenceGrows(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	var last uint64
	tokens := map[string]bool{}
	for i := range 3 {
		r := runBin(t, env, runArgs(nil, "fence:a", "env")...)
		if r.code != 0 {
			t.Fatalf("run %d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
		vars := parseVars(t, r.stdout)
		fence, err := strconv.ParseUint(vars["DLOCK_FENCE"], 10, 64)
		if err != nil || fence <= last {
			t.Fatalf("run %d: DLOCK_FENCE %q after %d", i, vars["DLOCK_FENCE"], last)
		}
		last = fence
		if vars["DLOCK_KEY"] != "fence:a" {
			t.Errorf("DLOCK_KEY %q", vars["DLOCK_KEY"])
		}
		if tok := vars["DLOCK_TOKEN"]; len(tok) < 16 || tokens[tok] {
			t.Errorf("DLOCK_TOKEN %q: want a fresh random token", tok)
		}
		tokens[vars["DLOCK_TOKEN"]] = true
	}
}

// TestRunUnreachable: a closed port and a frozen server both exit 69 within
// the wait bound, with one line on stderr.
func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	r := runBin(t, binEnv(), "run", "--wait", "2s", "--redis", closedURL(t, ""), "k", "--", "true")
	if r.code != exitUnavailable {
		t.Fatalf("closed port: exit %d, want %d; stderr: %s", r.code, exitUnavailable, r.stderr)
	}
	oneLine(t, r.stderr)
	if r.elapsed > 2*time.Second+3*time.Second {
		t.Errorf("closed port: took %v with --wait 2s", r.elapsed)
	}

	srv := testsrv.StartRedis(t)
	srv.Pause()
	defer srv.Resume()
	r = runBin(t, binEnv(), "run", "--wait", "1s", "--redis", srv.URL(), "k", "--", "true")
	if r.code != exitUnavailable {
		t.Fatalf("frozen server: exit %d, want %d; stderr: %s", r.code, exitUnavailable, r.stderr)
	}
	oneLine(t, r.stderr)
	if r.elapsed < time.Second || r.elapsed > time.Second+3*time.Second {
		t.Errorf("frozen server: took %v with --wait 1s", r.elapsed)
	}
}

// TestSilentServerOneTry: with the client's default timeouts (a URL that
// sets none), every command against a server that accepts connections and
// never answers (SIGSTOP) exits 69 within one try's documented bound,
// dial_timeout + read_timeout (5s + 3s), whatever a try sends: the holder
// record beside the grant, the probe for native commands before an
// extension or a release.
func TestSilentServerOneTry(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	srv.Pause()
	defer srv.Resume()
	const bound = 5*time.Second + 3*time.Second
	env := binEnv("DLOCK_REDIS="+srv.URL(), "DLOCK_TOKEN=x")
	var procs []*proc
	argss := [][]string{
		{"run", "-n", "k", "--", "true"},
		{"run", "-n", "--no-holder", "k", "--", "true"},
		{"acquire", "-n", "k"},
		{"extend", "k"},
		{"release", "k"},
	}
	for _, args := range argss {
		procs = append(procs, startBin(t, env, args...))
	}
	for i, p := range procs {
		// 3s is the margin of a loaded 2-core machine (a race-enabled
		// binary starting), far below a second try.
		if r := p.wait(t); r.code != exitUnavailable || r.elapsed > bound+3*time.Second {
			t.Errorf("dlock %q on a silent server: exit %d after %v, want %d within %v; stderr: %s",
				argss[i], r.code, r.elapsed.Round(time.Millisecond), exitUnavailable, bound, r.stderr)
		}
	}
}

// TestRedisURLTimeouts: a Redis URL without timeouts gets the documented
// ones (one try: 5s + 3s), whatever go-redis's defaults are; the URL's own
// win.
func TestRedisURLTimeouts(t *testing.T) {
	a := &app{stderr: io.Discard}
	for url, want := range map[string][3]time.Duration{
		"redis://127.0.0.1:1": {5 * time.Second, 3 * time.Second, 3 * time.Second},
		"redis://127.0.0.1:1?read_timeout=1s&dial_timeout=2s":   {2 * time.Second, time.Second, time.Second},
		"redis://127.0.0.1:1?write_timeout=4s&read_timeout=1ms": {5 * time.Second, time.Millisecond, 4 * time.Second},
	} {
		b, err := a.openRedis([]string{url}, &backendFlags{})
		if err != nil {
			t.Fatal(err)
		}
		o := b.clients[0].(*redis.Client).Options()
		b.close()
		if got := [3]time.Duration{o.DialTimeout, o.ReadTimeout, o.WriteTimeout}; got != want {
			t.Errorf("%s: dial, read and write timeouts %v, want %v", url, got, want)
		}
	}
}

// TestBadFlagsBinary: the real binary exits 64 with one line on bad flags.
func TestBadFlagsBinary(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--ttl", "x", "k", "--", "true"},
		{"run", "--redis", "redis://127.0.0.1:1", "k"},
		{"run", "--bogus"},
		{"acquire", "--redis", "redis://127.0.0.1:1"},
	} {
		r := runBin(t, binEnv(), args...)
		if r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d", args, r.code, exitUsage)
		}
		oneLine(t, r.stderr)
	}
}

// TestTokenCommandsScript holds a lock across several commands of a shell
// script, the way the help suggests.
func TestTokenCommandsScript(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	script := `
set -u
lock=$(dlock acquire deploy --ttl 10s) || exit 10
eval "$lock"
[ "$DLOCK_KEY" = deploy ] || exit 11
dlock acquire deploy --ttl 10s >/dev/null 2>&1; [ $? -eq 75 ] || exit 12
dlock extend deploy "$DLOCK_TOKEN" --ttl 10s || exit 13
dlock extend deploy not-the-token --ttl 10s 2>/dev/null; [ $? -eq 76 ] || exit 14
dlock release deploy not-the-token 2>/dev/null; [ $? -eq 76 ] || exit 15
dlock release deploy "$DLOCK_TOKEN" || exit 16
dlock release deploy "$DLOCK_TOKEN" 2>/dev/null; [ $? -eq 76 ] || exit 17
first=$DLOCK_FENCE
dlock acquire deploy --ttl 10s --json || exit 18
echo "first=$first"
`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = binEnv("DLOCK_REDIS="+srv.URL(), "PATH="+filepath.Dir(dlockBin)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	var j struct {
		Key   string `json:"key"`
		Token string `json:"token"`
		Fence uint64 `json:"fence"`
		TTLms int64  `json:"ttl_ms"`
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &j) != nil {
		t.Fatalf("script output:\n%s", out)
	}
	first, _ := strconv.ParseUint(strings.TrimPrefix(lines[1], "first="), 10, 64)
	if j.Key != "deploy" || j.Token == "" || j.TTLms != 10000 || j.Fence <= first {
		t.Fatalf("acquire --json gave %+v after fence %d", j, first)
	}
}

// TestInspect lists a lock held by dlock run, with its fence and the
// holder that published itself, as JSON and as a table; keys without a TTL
// and dlock's own keys are not listed; the holder key goes with the lock.
func TestInspect(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	env := binEnv("DLOCK_REDIS=" + srv.URL())
	if err := c.Set(ctx, "jobs:no-expiry", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "jobs:other-client", "their-token", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	p := startBin(t, env, runArgs([]string{"--ttl", "20s"}, "jobs:nightly", "hold", ready, "60s")...)
	waitFile(t, ready, p)

	r := runBin(t, env, "inspect", "jobs:*", "--json")
	if r.code != 0 {
		t.Fatalf("inspect: exit %d; stderr: %s", r.code, r.stderr)
	}
	var got struct{ Locks []dlock.LockInfo }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if len(got.Locks) != 2 || got.Locks[0].Key != "jobs:nightly" || got.Locks[1].Key != "jobs:other-client" {
		t.Fatalf("inspect listed %s, want jobs:nightly and jobs:other-client", r.stdout)
	}
	l := got.Locks[0]
	host, _ := os.Hostname()
	switch {
	case l.TTL <= 0 || l.TTL > 20*time.Second:
		t.Errorf("TTL %v", l.TTL)
	case l.Fence == 0:
		t.Errorf("fence %v, want the lock's fence", l.Fence)
	case l.PID != p.cmd.Process.Pid || l.Host != host || l.Since.IsZero():
		t.Errorf("holder %+v, want pid %d on %s", l, p.cmd.Process.Pid, host)
	case l.Node != srv.Addr:
		t.Errorf("node %q, want %q", l.Node, srv.Addr)
	}
	if o := got.Locks[1]; o.Fence != 0 || o.PID != 0 || o.Host != "" || !strings.Contains(r.stdout, `"fence":null,"holder":null`) {
		t.Errorf("a lock from another client shows fence %v, holder %+v: %s", o.Fence, o, r.stdout)
	}
	for _, k := range []string{"fence", "holder", "ttl_ms", "node", "key"} {
		if !strings.Contains(r.stdout, `"`+k+`":`) {
			t.Errorf("JSON lacks field %q: %s", k, r.stdout)
		}
	}

	r = runBin(t, env, "inspect")
	if r.code != 0 || !strings.Contains(r.stdout, "jobs:nightly") || !strings.Contains(r.stdout, fmt.Sprintf("pid %d", p.cmd.Process.Pid)) {
		t.Fatalf("inspect table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "dlock:") || strings.Contains(r.stdout, "no-expiry") {
		t.Errorf("inspect lists dlock's own keys or keys without a TTL:\n%s", r.stdout)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t)
	if n, _ := c.Exists(ctx, "jobs:nightly", keys.Holder("jobs:nightly")).Result(); n != 0 {
		t.Errorf("%d of the lock and holder keys are left after dlock ended: %v (stderr %s)", n, c.Keys(ctx, "*").Val(), p.stderr.String())
	}
	r = runBin(t, env, "inspect", "nothing:*", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"locks":[]}` {
		t.Errorf("inspect with no match: exit %d, %q", r.code, r.stdout)
	}
}

// TestDemoInterrupted: Ctrl-C during `dlock demo` ends it with 130 and
// leaves neither its temporary servers nor their files behind.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cmd := exec.Command(dlockBin, "demo")
	cmd.Env = binEnv("TMPDIR=" + tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		first <- line
		io.Copy(io.Discard, out)
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("dlock demo printed nothing within 30s")
	}
	if entries, _ := os.ReadDir(tmp); len(entries) == 0 {
		t.Errorf("the demo's first line came before its servers' directory existed: %q", line)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) {
		t.Fatalf("demo after SIGINT: exit %d (%v), want 130; stderr: %s", code, err, stderr.String())
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("the demo left %d entries in TMPDIR, e.g. %s", len(entries), entries[0].Name())
	}
	// The ports named on the first line are closed again.
	for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r < '0' || r > '9' }) {
		if p, _ := strconv.Atoi(f); p > 1024 && p < 65536 {
			if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", f), time.Second); err == nil {
				c.Close()
				t.Errorf("port %d from %q still accepts connections after the demo ended", p, line)
			}
		}
	}
}

// TestTortureBinary: dlock torture runs its workers by re-executing the
// binary; a short clean run is SAFE (exit 0), a negative control UNSAFE
// (exit 1), each with its verdict on stdout.
func TestTortureBinary(t *testing.T) {
	t.Parallel()
	r := runBin(t, binEnv(), "torture", "--duration", "3s", "--workers", "2", "--faults", "pause", "--seed", "1")
	if r.code != exitOK || !strings.Contains(r.stdout, "\nSAFE (seed 1)\n") || !strings.Contains(r.stdout, "sections completed") {
		t.Errorf("dlock torture: exit %d, want 0 with a SAFE verdict; stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, binEnv(), "torture", "--control", "nofence", "--seed", "1")
	if r.code != exitFailure || !strings.Contains(r.stdout, `UNSAFE, as the negative control "nofence" must be`) {
		t.Errorf("dlock torture --control nofence: exit %d, want 1 with an UNSAFE verdict; stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
