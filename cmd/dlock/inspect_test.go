package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
)

// TestInspectPostgres: --postgres lists an advisory lock another session
// took with raw SQL, with its pid and application_name, as JSON and table.
func TestInspectPostgres(t *testing.T) {
	t.Parallel()
	pg := testsrv.StartPostgres(t)
	ctx := context.Background()
	conn, err := pg.Pool(t, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	n, _ := pglock.HashKey("jobs:nightly").Int64()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT set_config('application_name', 'cron', false), pg_advisory_lock($1)) s", n).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	env := []string{"DLOCK_POSTGRES=" + pg.DSN()}

	r := runInProcess(t, env, "inspect", "--json")
	var got struct{ Locks []dlock.LockInfo }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
		t.Fatalf("inspect --postgres --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := "advisory:" + strconv.FormatInt(n, 10)
	if len(got.Locks) != 1 || got.Locks[0].Key != want ||
		got.Locks[0].PID != pid || got.Locks[0].Service != "cron" || got.Locks[0].TTL != 0 {
		t.Fatalf("inspect --postgres: %s, want %s held by pid %d (cron)", r.stdout, want, pid)
	}
	// A plain name is mapped to its advisory key.
	r = runInProcess(t, env, "inspect", "jobs:nightly")
	if r.code != 0 || !strings.Contains(r.stdout, "jobs:nightly") || !strings.Contains(r.stdout, "pid "+strconv.Itoa(pid)+" (cron)") {
		t.Fatalf("inspect --postgres jobs:nightly (table): exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestInspectPostgresRun: a lock held by `dlock run --postgres` is listed
// by its name, for every pattern that matches the name; with --no-holder
// the name is not published and only a plain name finds it.
func TestInspectPostgresRun(t *testing.T) {
	t.Parallel()
	pg := testsrv.StartPostgres(t)
	env := binEnv("DLOCK_POSTGRES=" + pg.DSN())
	if err := pg.Exec(context.Background(), pglock.MigrateSQL); err != nil {
		t.Fatal(err)
	}
	for _, noHolder := range []bool{false, true} {
		key := "pg:inspect:held"
		var args []string
		if noHolder {
			key, args = "pg:inspect:anonymous", []string{"--no-holder"}
		}
		ready := filepath.Join(t.TempDir(), "ready")
		p := startBin(t, env, runArgs(args, key, "hold", ready, "60s")...)
		waitFile(t, ready, p)
		n, _ := pglock.HashKey(key).Int64()
		advisory := "advisory:" + strconv.FormatInt(n, 10)
		for _, pattern := range []string{"*", "pg:*", key} {
			want := key
			if noHolder && pattern != key {
				want = advisory
			}
			r := runInProcess(t, env, "inspect", pattern, "--json")
			var got struct{ Locks []dlock.LockInfo }
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
				t.Fatalf("inspect %s --json: exit %d\n%s%s", pattern, r.code, r.stdout, r.stderr)
			}
			if noHolder && pattern == "pg:*" {
				want = "" // advisory:<n> does not match pg:*
			}
			switch {
			case want == "" && len(got.Locks) != 0:
				t.Errorf("--no-holder %v, inspect %s: %s, want nothing", noHolder, pattern, r.stdout)
			case want != "" && (len(got.Locks) != 1 || got.Locks[0].Key != want || got.Locks[0].PID == 0):
				t.Errorf("--no-holder %v, inspect %s: %s, want %s with its holder", noHolder, pattern, r.stdout, want)
			}
		}
		if r := runInProcess(t, env, "inspect"); !noHolder && (r.code != 0 || !strings.Contains(r.stdout, key+" ")) {
			t.Errorf("inspect (table): exit %d, want %s listed\n%s%s", r.code, key, r.stdout, r.stderr)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
	}
}

// TestInspectLimitAndTokens: --limit bounds the listing; tokens show only
// with --show-token, in the JSON and as a table column.
func TestInspectLimitAndTokens(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{"w:a", "w:b", "w:c"} {
		c.Set(ctx, k, "tok-"+k, time.Minute)
	}
	env := []string{"DLOCK_REDIS=" + srv.URL()}
	for _, show := range []bool{false, true} {
		args := []string{"inspect", "w:*", "--limit", "2", "--json"}
		if show {
			args = append(args, "--show-token")
		}
		r := runInProcess(t, env, args...)
		var got struct{ Locks []dlock.LockInfo }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got.Locks) != 2 || !got.Locks[0].Majority {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		if show != strings.Contains(r.stdout, `"token":"tok-`) || (show && got.Locks[0].Token != "tok-"+got.Locks[0].Key) {
			t.Errorf("%v shows tokens: %v, want %v:\n%s", args, !show, show, r.stdout)
		}
	}
	r := runInProcess(t, env, "inspect", "w:*")
	if r.code != 0 || !strings.Contains(r.stdout, "WAITING") || strings.Contains(r.stdout, "tok-") || strings.Count(r.stdout, "\nw:") != 3 {
		t.Fatalf("inspect table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runInProcess(t, env, "inspect", "w:*", "--show-token")
	if r.code != 0 || !strings.Contains(r.stdout, "TOKEN") || strings.Count(r.stdout, "tok-w:") != 3 {
		t.Fatalf("inspect table --show-token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestInspectJSONIsLockInfo: what `inspect --json --show-token` prints for
// each lock is byte for byte what dlock.LockInfo encodes, and decodes to
// what the library's Inspect returns: one schema, not two.
func TestInspectJSONIsLockInfo(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	ctx := context.Background()
	l, err := redislock.New(srv.Client(t), redislock.WithHolderInfo("billing-svc"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, k := range []string{"rt:a", "rt:b"} {
		lock, err := l.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
	}
	srv.Client(t).Set(ctx, "rt:plain", "their-token", time.Minute) // another client's lock: no fence, no holder

	r := runInProcess(t, []string{"DLOCK_REDIS=" + srv.URL()}, "inspect", "rt:*", "--json", "--show-token")
	var raw struct{ Locks []json.RawMessage }
	var got struct{ Locks []dlock.LockInfo }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &raw) != nil || json.Unmarshal([]byte(r.stdout), &got) != nil {
		t.Fatalf("inspect --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want, err := l.Inspect(ctx, "rt:*", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Locks) != 3 || len(want) != 3 {
		t.Fatalf("the command listed %d locks, the library %d; want 3:\n%s", len(got.Locks), len(want), r.stdout)
	}
	for i, li := range got.Locks {
		again, err := li.MarshalJSONWithToken()
		if err != nil || string(again) != string(raw.Locks[i]) {
			t.Errorf("lock %d: the command printed\n%s\nLockInfo encodes it as\n%s (%v)", i, raw.Locks[i], again, err)
		}
		w := want[i]
		if li.TTL <= 0 || li.TTL > w.TTL+time.Second || w.TTL > li.TTL+time.Second {
			t.Errorf("lock %d: TTL %v from the command, %v from the library", i, li.TTL, w.TTL)
		}
		li.TTL, w.TTL = 0, 0
		if !li.Since.Equal(w.Since) {
			t.Errorf("lock %d: since %v from the command, %v from the library", i, li.Since, w.Since)
		}
		li.Since, w.Since = time.Time{}, time.Time{}
		if li != w {
			t.Errorf("lock %d:\n the command: %+v\n the library: %+v", i, li, w)
		}
	}
	if a := got.Locks[0]; a.Key != "rt:a" || a.Service != "billing-svc" || a.PID != os.Getpid() || a.Fence == 0 || a.Token == "" {
		t.Errorf("rt:a listed as %+v, want its fence, token and holder (billing-svc, pid %d)", a, os.Getpid())
	}
}

// TestInspectWatchPipe: `inspect --watch --json` into a pipe writes one
// JSON document per line and no terminal escapes, each line a listing as
// it is then: a lock released while it watches disappears from the next
// lines. SIGINT ends it with 0.
func TestInspectWatchPipe(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	c.Set(ctx, "pw:a", "tok-a", time.Minute)
	c.Set(ctx, "pw:b", "tok-b", time.Minute)

	cmd := exec.Command(dlockBin, "inspect", "pw:*", "--watch", "50ms", "--json")
	cmd.Env = binEnv("DLOCK_REDIS=" + srv.URL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	// Every line parses; read until b has been gone for two lines.
	sc := bufio.NewScanner(stdout)
	var lines []string
	released, gone := false, 0
	for gone < 2 && sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if strings.ContainsAny(line, "\x1b") {
			t.Fatalf("line %d has a terminal escape: %q", len(lines), line)
		}
		var doc struct{ Locks []dlock.LockInfo }
		dec := json.NewDecoder(strings.NewReader(line))
		if err := dec.Decode(&doc); err != nil || dec.More() {
			t.Fatalf("line %d is not one JSON document (%v): %q", len(lines), err, line)
		}
		keys := make([]string, len(doc.Locks))
		for i, li := range doc.Locks {
			keys[i] = li.Key
			if li.Token != "" || li.TTL <= 0 {
				t.Errorf("line %d: %+v: a token without --show-token, or no TTL", len(lines), li)
			}
		}
		switch k := strings.Join(keys, ","); {
		case k == "pw:a,pw:b" && !released:
			if len(lines) >= 3 {
				c.Del(ctx, "pw:b") // the lock goes while the command watches
				released = true
			}
		case k == "pw:a" && released:
			gone++
		case k != "pw:a,pw:b":
			t.Fatalf("line %d lists %q (released: %v)", len(lines), k, released)
		}
	}
	if gone < 2 {
		t.Fatalf("the listing ended after %d lines (%v), before pw:b was gone from two: %q; stderr %s", len(lines), sc.Err(), lines, stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("inspect --watch after SIGINT: %v; stderr %s", err, stderr.String())
	}
	// What came after the last line read parses too.
	for _, line := range strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Errorf("a last line is not JSON: %q", line)
		}
	}
}
