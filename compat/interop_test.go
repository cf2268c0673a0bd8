package compat_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// nodeRedlock makes sure Node.js and node-redlock (redlock@5.0.0-beta.2 with
// ioredis, pinned in testdata/package-lock.json) are installed, and returns
// the node binary. A missing Node.js fails the test with the command that
// installs it: a skipped interoperability test would pass for the wrong
// reason.
func nodeRedlock(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found on PATH; install Node.js and npm with: apt-get install -y nodejs npm (or run `make test`, which does)")
	}
	dir, _ := filepath.Abs("testdata")
	if b, err := os.ReadFile(filepath.Join(dir, "node_modules", "redlock", "package.json")); err == nil && strings.Contains(string(b), `"version": "5.0.0-beta.2"`) {
		return node
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm not found on PATH; install it with: apt-get install -y npm (or run `make test`, which does)")
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s\ninstall by hand with: cd compat/testdata && npm ci", dir, err, out)
	}
	return node
}

// node-redlock processes and dlock goroutines contend for one resource on
// the same five nodes; the shared log and counter show that no two were
// ever inside at once, in either direction.
func TestInteropNodeRedlock(t *testing.T) {
	node := nodeRedlock(t)
	dir := t.TempDir()
	key := lockcheck.Key(t)
	var addrs []string
	for _, r := range shared {
		addrs = append(addrs, r.Addr)
	}
	const jsProcs, goWorkers, rounds = 2, 2, 15

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, jsProcs+goWorkers)
	for i := range jsProcs {
		cmd := exec.CommandContext(ctx, node, "contend.js", strings.Join(addrs, ","), key, fmt.Sprint(rounds), dir, fmt.Sprintf("node%d", i))
		cmd.Dir = "testdata"
		wg.Go(func() {
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("node-redlock contender: %v\n%s", err, out)
			}
		})
	}
	for i := range goWorkers {
		l := newLocker(t, shared)
		wg.Go(func() {
			for n := 0; n < rounds; {
				err := dlock.Do(ctx, l, key, 500*time.Millisecond, func(ctx context.Context) error {
					return criticalSection(dir, fmt.Sprintf("dlock%d", i), dlock.LockFromContext(ctx).Fence())
				}, dlock.WithRetryDelay(20*time.Millisecond), dlock.WithRetryJitter(20*time.Millisecond))
				switch {
				case err == nil:
					n++
				case transient(err) && ctx.Err() == nil:
				default:
					errs <- fmt.Errorf("dlock contender: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	ivs := checkLog(t, dir, (jsProcs+goWorkers)*rounds)
	var js, gos int
	for _, iv := range ivs {
		if strings.HasPrefix(iv.who, "node") {
			js++
		} else {
			gos++
		}
	}
	if js != jsProcs*rounds || gos != goWorkers*rounds {
		t.Fatalf("sections: %d by node-redlock, %d by dlock", js, gos)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("contenders ran out of time")
	}
}
