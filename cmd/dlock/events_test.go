package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestRunOneLinePerEvent: each thing that happens to the lock or the
// backend is said once, in one human line on stderr: a lost lock (the
// library's own record of the loss is not printed beside the command's
// line), and the library's warning about the backend (an eviction policy
// that can drop lock keys).
func TestRunOneLinePerEvent(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	env := []string{"DLOCK_REDIS=" + srv.URL(), childMarker + "=1", "GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH")}

	t.Run("lost", func(t *testing.T) {
		ready := filepath.Join(t.TempDir(), "ready")
		done := make(chan result, 1)
		go func() {
			done <- runInProcess(t, env, runArgs([]string{"--ttl", "3s", "--grace", "1s"}, "events:lost", "hold", ready, "60s")...)
		}()
		waitFile(t, ready, nil)
		if err := c.Del(ctx, "events:lost").Err(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.code != exitLost {
			t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitLost, r.stderr)
		}
		oneLine(t, r.stderr)
		humanLines(t, r.stderr)
		if !strings.Contains(r.stderr, `lock "events:lost" lost`) || !strings.Contains(r.stderr, "SIGTERM") {
			t.Errorf("stderr %q does not say the lock was lost and the command terminated", r.stderr)
		}
	})

	t.Run("eviction policy", func(t *testing.T) {
		if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction") })
		r := runInProcess(t, env, "run", "--no-holder", "events:evict", "--", "true")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
		}
		oneLine(t, r.stderr)
		humanLines(t, r.stderr)
		if !strings.Contains(r.stderr, "maxmemory-policy noeviction") || !strings.Contains(r.stderr, "allkeys-lru") {
			t.Errorf("stderr %q does not name the policy and the cure", r.stderr)
		}
	})

	t.Run("redlock warning", func(t *testing.T) {
		rs := testsrv.StartRedisN(t, 2)
		r := runInProcess(t, env, "run", "--redis", rs[0].URL(), "--redis", rs[1].URL(), "events:redlock", "true")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
		}
		oneLine(t, r.stderr)
		humanLines(t, r.stderr)
		if want := "dlock run: redlock: 2 nodes: Redlock tolerates no failed node below 3"; !strings.HasPrefix(r.stderr, want) {
			t.Errorf("stderr %q, want %q", r.stderr, want)
		}
	})
}

// TestRunExtensionRetried: an extension that fails while the lock is still
// valid (the server silent for a moment) is said in one human line, and the
// command goes on once a retry succeeds.
func TestRunExtensionRetried(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	proxy := testproxy.Start(t, srv.Addr)
	url := "redis://" + proxy.Addr + "/0?dial_timeout=300ms&read_timeout=300ms&write_timeout=300ms"
	// --ttl 15s: the first extension comes 5s after the grant, retries every
	// 1.25s, and SIGTERM would come with 5s of validity left.
	_, finish := startHolding(t, "flaky", "--redis", url, "--ttl", "15s")

	proxy.Blackhole(t)
	// Once the key has 8.5s left (6.5s after the grant), the first
	// extension has failed; heal, and wait for a retry to succeed.
	lockcheck.Eventually(t, 20*time.Second, func() error {
		if ttl := c.PTTL(ctx, "flaky").Val(); ttl > 8500*time.Millisecond {
			return fmt.Errorf("the key has %v left", ttl)
		}
		return nil
	})
	proxy.Heal()
	lockcheck.Eventually(t, 20*time.Second, func() error {
		if ttl := c.PTTL(ctx, "flaky").Val(); ttl < 12*time.Second {
			return fmt.Errorf("not extended: the key has %v left", ttl)
		}
		return nil
	})
	r := finish()
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	humanLines(t, r.stderr)
	if !strings.Contains(r.stderr, `extending lock "flaky" failed, retrying while it is valid`) {
		t.Errorf("stderr %q does not say the extension failed", r.stderr)
	}
}
