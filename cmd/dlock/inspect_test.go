package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
