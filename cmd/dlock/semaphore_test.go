package main

import (
	"strconv"
	"strings"
	"testing"

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
