package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestRedlock: several --redis URLs make a Redlock: runs serialize with
// growing fences, the token commands work across the nodes, inspect lists
// every node, one lost node of three is survived and two are not.
func TestRedlock(t *testing.T) {
	t.Parallel()
	srvs := testsrv.StartRedisN(t, 3)
	var flags, urls []string
	for _, s := range srvs {
		flags = append(flags, "--redis", s.URL())
		urls = append(urls, s.URL())
	}
	env := binEnv()

	log := filepath.Join(t.TempDir(), "log")
	a := startBin(t, env, runArgs(append([]string{"--wait", "30s"}, flags...), "rl:serial", "record", log, "200ms")...)
	b := startBin(t, env, runArgs(append([]string{"--wait", "30s"}, flags...), "rl:serial", "record", log, "200ms")...)
	for _, p := range []*proc{a, b} {
		if r := p.wait(t); r.code != 0 {
			t.Fatalf("Redlock run: exit %d; stderr: %s", r.code, r.stderr)
		}
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "enter") || !strings.HasPrefix(lines[1], "exit") ||
		!strings.HasPrefix(lines[2], "enter") || !strings.HasPrefix(lines[3], "exit") {
		t.Fatalf("the two commands overlapped or did not run:\n%s", strings.Join(lines, "\n"))
	}
	f1, _ := strconv.ParseUint(strings.Fields(lines[0])[2], 10, 64)
	f2, _ := strconv.ParseUint(strings.Fields(lines[2])[2], 10, 64)
	if f1 == 0 || f2 <= f1 {
		t.Errorf("Redlock fences %d then %d: want growing", f1, f2)
	}

	// The token commands, with the nodes from the environment (in-process:
	// the binary paths are the same as for a single node).
	renv := []string{"DLOCK_REDIS=" + strings.Join(urls, ",")}
	r := runInProcess(t, renv, "acquire", "rl:tokens", "--ttl", "20s")
	if r.code != 0 {
		t.Fatalf("acquire: exit %d; stderr: %s", r.code, r.stderr)
	}
	vars := parseVars(t, r.stdout)
	if r := runInProcess(t, renv, "acquire", "rl:tokens"); r.code != exitBusy {
		t.Errorf("second acquire: exit %d, want %d", r.code, exitBusy)
	}
	r = runInProcess(t, renv, "inspect", "rl:*", "--json")
	var got struct{ Locks []dlock.LockInfo }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Locks) != 3 {
		t.Fatalf("inspect on 3 nodes: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	for i, l := range got.Locks {
		if l.Key != "rl:tokens" || l.Fence == 0 || !containsNode(got.Locks, srvs[i].Addr) {
			t.Errorf("inspect row %+v; want rl:tokens with a fence on every node", l)
		}
	}
	if r := runInProcess(t, renv, "extend", "rl:tokens", vars["DLOCK_TOKEN"], "--ttl", "20s"); r.code != 0 {
		t.Errorf("extend: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runInProcess(t, renv, "release", "rl:tokens", vars["DLOCK_TOKEN"]); r.code != 0 {
		t.Errorf("release: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runInProcess(t, renv, "release", "rl:tokens", vars["DLOCK_TOKEN"]); r.code != exitLost {
		t.Errorf("second release: exit %d, want %d", r.code, exitLost)
	}

	srvs[0].Kill()
	if r := runBin(t, env, runArgs(flags, "rl:faults", "exit", "0")...); r.code != 0 {
		t.Errorf("with 1 of 3 nodes down: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	srvs[1].Kill()
	r = runBin(t, env, runArgs(flags, "rl:faults", "exit", "0")...)
	if r.code != exitUnavailable {
		t.Errorf("with 2 of 3 nodes down: exit %d, want %d; stderr: %s", r.code, exitUnavailable, r.stderr)
	}
	oneLine(t, r.stderr)
}

func containsNode(rows []dlock.LockInfo, node string) bool {
	for _, r := range rows {
		if r.Node == node {
			return true
		}
	}
	return false
}

// TestPostgres: --postgres refuses to change the schema unless asked
// (--create-fence-table creates the fence sequence), runs under an advisory
// lock with growing fences; a busy lock exits 75; a killed
// session is a lost lock: the command is terminated and dlock exits 76.
func TestPostgres(t *testing.T) {
	t.Parallel()
	pg := testsrv.StartPostgres(t)
	env := binEnv("DLOCK_POSTGRES=" + pg.DSN())
	if r := runBin(t, env, runArgs(nil, "pg:fence", "env")...); r.code != exitMisconfigured || !strings.Contains(r.stderr, "--create-fence-table") {
		t.Fatalf("run on a database without the fence sequence: exit %d, want %d naming --create-fence-table; stderr: %s", r.code, exitMisconfigured, r.stderr)
	}
	// A user who may not create it is told why, not to pass the flag
	// (PostgreSQL 15 gives PUBLIC no CREATE on schema public).
	if err := pg.Exec(context.Background(), "CREATE ROLE app LOGIN"); err != nil {
		t.Fatal(err)
	}
	appEnv := binEnv("DLOCK_POSTGRES=" + strings.Replace(pg.DSN(), "//postgres@", "//app@", 1))
	r := runBin(t, appEnv, runArgs([]string{"--create-fence-table"}, "pg:fence", "env")...)
	if r.code != exitMisconfigured || !strings.Contains(r.stderr, "permission denied") || strings.Contains(r.stderr, "run once with") {
		t.Fatalf("--create-fence-table without CREATE rights: exit %d, want %d with the server's reason; stderr: %s", r.code, exitMisconfigured, r.stderr)
	}
	oneLine(t, r.stderr)
	var last uint64
	for i := range 2 {
		r := runBin(t, env, runArgs([]string{"--create-fence-table"}, "pg:fence", "env")...)
		if r.code != 0 {
			t.Fatalf("run %d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
		fence, _ := strconv.ParseUint(parseVars(t, r.stdout)["DLOCK_FENCE"], 10, 64)
		if fence <= last {
			t.Fatalf("run %d: fence %d after %d", i, fence, last)
		}
		last = fence
	}
	// app may not draw fences either: waiting cannot fix that, so run
	// does not wait (10s is far below --wait, and far above one attempt
	// on a loaded machine).
	r = runBin(t, appEnv, runArgs([]string{"--wait", "30s"}, "pg:fence", "env")...)
	if r.code != exitMisconfigured || r.elapsed >= 10*time.Second || !strings.Contains(r.stderr, "permission denied for sequence") {
		t.Fatalf("run -w 30s by a role without USAGE on the fence sequence: exit %d after %v, want %d at once; stderr: %s", r.code, r.elapsed, exitMisconfigured, r.stderr)
	}
	oneLine(t, r.stderr)

	ready := filepath.Join(t.TempDir(), "ready")
	holder := startBin(t, env, runArgs([]string{"--ttl", "1s", "--grace", "1s"}, "pg:lost", "hold", ready, "60s")...)
	waitFile(t, ready, holder)
	if r := runBin(t, env, runArgs(nil, "pg:lost", "exit", "0")...); r.code != exitBusy {
		t.Fatalf("second run on a held key: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
	}
	ctx := context.Background()
	locks, err := pg.AdvisoryLocks(ctx)
	if err != nil || len(locks) != 1 || !locks[0].Granted {
		t.Fatalf("advisory locks %+v, %v: want the holder's one", locks, err)
	}
	if err := pg.Terminate(ctx, locks[0].PID); err != nil {
		t.Fatal(err)
	}
	r = holder.wait(t)
	if r.code != exitLost || !strings.Contains(r.stderr, "lost") {
		t.Fatalf("after the session was killed: exit %d, want %d; stderr: %s", r.code, exitLost, r.stderr)
	}
	humanLines(t, r.stderr)
}

// TestPostgresFirstRunsTogether: several `dlock run --create-fence-table`
// started at once on a fresh database (cron jobs on several machines, on
// their first night) all create the schema without tripping over each
// other, and then all run, one at a time, with growing fences.
func TestPostgresFirstRunsTogether(t *testing.T) {
	t.Parallel()
	pg := testsrv.StartPostgres(t)
	env := binEnv("DLOCK_POSTGRES=" + pg.DSN())
	log := filepath.Join(t.TempDir(), "log")
	const n = 3
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = startBin(t, env, runArgs([]string{"--create-fence-table", "--wait", "30s"}, "pg:first", "record", log, "100ms")...)
	}
	for i, p := range procs {
		if r := p.wait(t); r.code != 0 {
			t.Errorf("run #%d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
	}
	if t.Failed() {
		return
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
	var last uint64
	for i, line := range lines {
		f := strings.Fields(line)
		want := "enter"
		if i%2 == 1 {
			want = "exit"
		}
		if len(lines) != 2*n || f[0] != want {
			t.Fatalf("the commands overlapped or did not all run:\n%s", strings.Join(lines, "\n"))
		}
		if want == "enter" {
			fence, _ := strconv.ParseUint(f[2], 10, 64)
			if fence <= last {
				t.Fatalf("fence %d after %d:\n%s", fence, last, strings.Join(lines, "\n"))
			}
			last = fence
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunHolderRedlock: dlock run on a Redlock publishes its holder record
// on every node that granted (Redlock's WithHolderInfo), inspect shows it
// on each node's row, and it goes with the release; --no-holder publishes
// none.
func TestRunHolderRedlock(t *testing.T) {
	t.Parallel()
	srvs := testsrv.StartRedisN(t, 3)
	var flags []string
	for _, s := range srvs {
		flags = append(flags, "--redis", s.URL())
	}
	env := binEnv()
	ctx := context.Background()
	host, _ := os.Hostname()
	for _, noHolder := range []bool{false, true} {
		args := append([]string{"--ttl", "20s"}, flags...)
		if noHolder {
			args = append(args, "--no-holder")
		}
		ready := filepath.Join(t.TempDir(), "ready")
		p := startBin(t, env, runArgs(args, "rl:holder", "hold", ready, "60s")...)
		waitFile(t, ready, p)
		r := runBin(t, env, append([]string{"inspect", "rl:*", "--json"}, flags...)...)
		var got struct{ Locks []dlock.LockInfo }
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Locks) != 3 {
			t.Fatalf("inspect (--no-holder %v): %v, %s; stderr: %s", noHolder, err, r.stdout, r.stderr)
		}
		for _, l := range got.Locks {
			switch {
			case !l.Majority:
				t.Errorf("row %+v: want majority", l)
			case noHolder && (l.PID != 0 || l.Host != ""):
				t.Errorf("--no-holder: row %+v shows a holder", l)
			case !noHolder && (l.PID != p.cmd.Process.Pid || l.Host != host):
				t.Errorf("row %+v: want holder pid %d on %s", l, p.cmd.Process.Pid, host)
			}
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
		for _, s := range srvs {
			if n, _ := s.Client(t).Exists(ctx, "rl:holder", keys.Holder("rl:holder")).Result(); n != 0 {
				t.Errorf("%s: %d of the lock and holder keys are left after dlock ended", s.Addr, n)
			}
		}
	}
}
