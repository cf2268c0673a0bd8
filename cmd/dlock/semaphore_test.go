package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestRunLimit: run --limit 2 admits two commands at once, each on a slot
// of its own, named in DLOCK_SLOT and DLOCK_KEY with a fence; a third
// exits 75 while both hold, saying the semaphore is full, and gets in
// once one is done.
func TestRunLimit(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	flags := []string{"--redis", srv.URL(), "--limit", "2"}
	_, finishA := startHolding(t, "vendor", flags...)
	_, finishB := startHolding(t, "vendor", flags...)

	env := []string{"DLOCK_REDIS=" + srv.URL()}
	r := runInProcess(t, env, "run", "-n", "--limit", "2", "vendor", "--", "true")
	if r.code != exitBusy || !strings.Contains(r.stderr, `semaphore "vendor" is full: its 2 permits are held`) {
		t.Fatalf("a third run: exit %d, want %d saying the semaphore is full; stderr: %s", r.code, exitBusy, r.stderr)
	}
	oneLine(t, r.stderr)

	a := finishA()
	if r := runInProcess(t, env, "run", "-n", "--limit", "2", "vendor", "--", "true"); r.code != 0 {
		t.Fatalf("a run after one holder finished: exit %d; stderr: %s", r.code, r.stderr)
	}
	b := finishB()
	slots := map[string]bool{}
	for _, res := range []result{a, b} {
		if res.code != 0 {
			t.Fatalf("holder: exit %d; stderr: %s", res.code, res.stderr)
		}
		vars := parseVars(t, res.stdout)
		slot := vars["DLOCK_SLOT"]
		if fence, err := strconv.ParseUint(vars["DLOCK_FENCE"], 10, 64); err != nil || fence == 0 ||
			(slot != "0" && slot != "1") || vars["DLOCK_KEY"] != "{vendor}#"+slot || slots[slot] {
			t.Fatalf("a holder's variables: %q (slots so far %v)", res.stdout, slots)
		}
		slots[slot] = true
	}
}

// TestAcquireLimit: acquire --limit prints the permit's slot and its
// slot's key, which extend and release take; a full semaphore exits 75; a
// bad limit is a usage error.
func TestAcquireLimit(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	env := []string{"DLOCK_REDIS=" + srv.URL()}
	var held []map[string]string
	for i := range 2 {
		r := runInProcess(t, env, "acquire", "--limit", "2", "--ttl", "20s", "exports")
		if r.code != 0 {
			t.Fatalf("acquire %d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
		vars := parseVars(t, r.stdout)
		if vars["DLOCK_SLOT"] != strconv.Itoa(i) || vars["DLOCK_KEY"] != "{exports}#"+strconv.Itoa(i) {
			t.Fatalf("acquire %d printed %q", i, r.stdout)
		}
		held = append(held, vars)
	}
	if r := runInProcess(t, env, "acquire", "--limit", "2", "exports"); r.code != exitBusy {
		t.Fatalf("a third acquire: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
	}
	if r := runInProcess(t, env, "extend", held[1]["DLOCK_KEY"], held[1]["DLOCK_TOKEN"], "--ttl", "20s"); r.code != 0 {
		t.Fatalf("extend: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runInProcess(t, env, "release", held[0]["DLOCK_KEY"], held[0]["DLOCK_TOKEN"]); r.code != 0 {
		t.Fatalf("release: exit %d; stderr: %s", r.code, r.stderr)
	}
	r := runInProcess(t, env, "acquire", "--limit", "2", "--json", "exports")
	if r.code != 0 || !strings.Contains(r.stdout, `"key":"{exports}#0"`) || !strings.Contains(r.stdout, `"slot":0`) {
		t.Fatalf("acquire --json after the release: exit %d, %s; stderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, bad := range []string{"0", "-1", "1001"} {
		if r := runInProcess(t, env, "acquire", "--limit", bad, "exports"); r.code != exitUsage {
			t.Errorf("--limit %s: exit %d, want %d; stderr: %s", bad, r.code, exitUsage, r.stderr)
		}
	}
}

// TestLimitRedlock: on three Redlock nodes, acquire --limit records the
// limit on every node (inspect shows it), a third acquire exits 75, one
// with another limit exits 64 naming the recorded limit, and run --limit
// gets in once a permit is released.
func TestLimitRedlock(t *testing.T) {
	t.Parallel()
	srvs := testsrv.StartRedisN(t, 3)
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.URL())
	}
	env := []string{"DLOCK_REDIS=" + strings.Join(urls, ",")}
	var held []map[string]string
	for i := range 2 {
		r := runInProcess(t, env, "acquire", "--limit", "2", "--ttl", "20s", "rl:exports")
		if r.code != 0 {
			t.Fatalf("acquire %d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
		held = append(held, parseVars(t, r.stdout))
	}
	if r := runInProcess(t, env, "acquire", "--limit", "2", "rl:exports"); r.code != exitBusy {
		t.Fatalf("a third acquire: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
	}
	r := runInProcess(t, env, "acquire", "--limit", "3", "rl:exports")
	if r.code != exitUsage || !strings.Contains(r.stderr, "the server has 2, this Locker 3") {
		t.Fatalf("acquire with another limit: exit %d, want %d naming the recorded limit; stderr: %s", r.code, exitUsage, r.stderr)
	}
	r = runInProcess(t, env, "inspect", "{rl:exports}#*", "--json")
	var got struct{ Locks []dlock.LockInfo }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Locks) != 6 {
		t.Fatalf("inspect: exit %d, %v, want 2 permits on 3 nodes:\n%s", r.code, err, r.stdout)
	}
	for _, l := range got.Locks {
		if l.Limit != 2 {
			t.Errorf("inspect row %+v: want limit 2", l)
		}
	}
	if r := runInProcess(t, env, "release", held[0]["DLOCK_KEY"], held[0]["DLOCK_TOKEN"]); r.code != 0 {
		t.Fatalf("release: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runInProcess(t, env, "run", "-n", "--limit", "2", "rl:exports", "--", "true"); r.code != 0 {
		t.Fatalf("run --limit after a release: exit %d; stderr: %s", r.code, r.stderr)
	}
}
