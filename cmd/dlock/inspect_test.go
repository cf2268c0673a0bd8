package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsrv"
	"github.com/dlock-go/dlock/pglock"
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
	var got struct{ Locks []lockRow }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
		t.Fatalf("inspect --postgres --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := "advisory:" + strconv.FormatInt(n, 10)
	if len(got.Locks) != 1 || got.Locks[0].Key != want || got.Locks[0].Holder == nil ||
		got.Locks[0].Holder.PID != pid || got.Locks[0].Holder.Service != "cron" || got.Locks[0].TTLms != 0 {
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
			var got struct{ Locks []lockRow }
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
				t.Fatalf("inspect %s --json: exit %d\n%s%s", pattern, r.code, r.stdout, r.stderr)
			}
			if noHolder && pattern == "pg:*" {
				want = "" // advisory:<n> does not match pg:*
			}
			switch {
			case want == "" && len(got.Locks) != 0:
				t.Errorf("--no-holder %v, inspect %s: %s, want nothing", noHolder, pattern, r.stdout)
			case want != "" && (len(got.Locks) != 1 || got.Locks[0].Key != want || got.Locks[0].Holder == nil):
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

// TestInspectLimitAndWatch: --limit bounds the listing; --watch redraws it
// (clearing the screen) until the context ends, then exits 0.
func TestInspectLimitAndWatch(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{"w:a", "w:b", "w:c"} {
		c.Set(ctx, k, "tok-"+k, time.Minute)
	}
	env := []string{"DLOCK_REDIS=" + srv.URL()}
	r := runInProcess(t, env, "inspect", "w:*", "--limit", "2", "--json")
	var got struct{ Locks []lockRow }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got.Locks) != 2 ||
		got.Locks[0].Token != "tok-"+got.Locks[0].Key || !got.Locks[0].Majority {
		t.Fatalf("inspect --limit 2 --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runInProcess(t, env, "inspect", "w:*")
	if r.code != 0 || !strings.Contains(r.stdout, "WAITING") || strings.Count(r.stdout, "tok-") != 0 || strings.Count(r.stdout, "\nw:") != 3 {
		t.Fatalf("inspect table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	var stdout, stderr bytes.Buffer
	wctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	code := run(wctx, []string{"inspect", "w:*", "--watch", "100ms"}, env, nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("inspect --watch: exit %d\n%s", code, stderr.String())
	}
	if n := strings.Count(stdout.String(), "\x1b[H\x1b[2J"); n < 2 || strings.Count(stdout.String(), "w:c") != n {
		t.Fatalf("inspect --watch drew %d screens in 700ms (want at least 2, each with the locks):\n%q", n, stdout.String())
	}
}
