package scripts

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testsrv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readRunID calls RedlockAcquire in "read" mode, as Rejoin does, and
// returns the run_id it reports.
func readRunID(t *testing.T, c redis.UniversalClient, fs *Functions) string {
	t.Helper()
	argv := RedlockAcquire.Argv([]string{"dlock:test:marker", "k", "k"}, "", 1, "1", "epoch", "read")
	v, err := RedlockAcquire.Run(testCtx(t), c, fs, argv).Slice()
	if err != nil {
		t.Fatal(err)
	}
	run, _ := v[1].(string)
	return run
}

var runIDLine = regexp.MustCompile(`run_id:([0-9a-f]+)`)

// serverState returns the server's run_id and how many INFO calls it has
// served so far (not counting this one's).
func serverState(t *testing.T, c *redis.Client) (run string, infos int) {
	t.Helper()
	stats := c.Info(testCtx(t), "commandstats", "server").Val()
	if m := regexp.MustCompile(`cmdstat_info:calls=(\d+)`).FindStringSubmatch(stats); m != nil {
		infos, _ = strconv.Atoi(m[1])
	}
	m := runIDLine.FindStringSubmatch(stats)
	if m == nil {
		t.Fatalf("no run_id in INFO: %q", stats)
	}
	return m[1], infos
}

func libraries(t *testing.T, c *redis.Client) []string {
	t.Helper()
	libs, err := c.FunctionList(testCtx(t), redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range libs {
		names = append(names, l.Name)
	}
	return names
}

// TestFunctionCachesRunID: RedlockAcquire, run as a function, reads INFO
// once per server process, and a restart that brings the library back from
// the RDB file reads it again: the run_id it reports is always the
// server's current one (the amnesia rule depends on that).
func TestFunctionCachesRunID(t *testing.T) {
	r := testsrv.StartRedis(t, testsrv.RedisArgs("--save", "", "--appendonly", "no", "--dbfilename", "dump.rdb"))
	c := r.Client(t)
	var fs Functions
	for range 20 {
		readRunID(t, c, &fs)
	}
	run, infos := serverState(t, c)
	if got := readRunID(t, c, &fs); got != run {
		t.Fatalf("function reported run_id %q, server has %q", got, run)
	}
	if infos != 1 {
		t.Fatalf("21 calls made %d INFO calls, want 1 (the cached read)", infos)
	}
	if fs.off.Load() || !slices.Contains(libraries(t, c), RedlockAcquire.Name()) {
		t.Fatalf("library %s not loaded (functions off: %v)", RedlockAcquire.Name(), fs.off.Load())
	}

	if err := c.Save(testCtx(t)).Err(); err != nil { // the library goes into dump.rdb
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	c = r.Client(t)
	if !slices.Contains(libraries(t, c), RedlockAcquire.Name()) {
		t.Fatal("library not restored from the RDB file: the test would not show a cache reset")
	}
	got := readRunID(t, c, &fs)
	now, _ := serverState(t, c)
	if now == run {
		t.Fatal("run_id unchanged by a restart")
	}
	if got != now {
		t.Fatalf("after a restart the function reported run_id %q (the old one is %q), server has %q", got, run, now)
	}
}

// TestFunctionFallback: where functions cannot be loaded (a user without
// the FUNCTION command; FCALL itself is missing before Redis 7.0), the
// script runs instead, and the Functions record remembers it.
func TestFunctionFallback(t *testing.T) {
	r := testsrv.StartRedis(t)
	admin := r.Client(t)
	if err := admin.Do(testCtx(t), "acl", "setuser", "nofunc", "on", "nopass", "~*", "&*", "+@all", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	opts := r.Options()
	opts.Username, opts.Password = "nofunc", "any" // nopass: any password
	c := redis.NewClient(opts)
	defer c.Close()

	var fs Functions
	run, _ := serverState(t, admin)
	for range 3 {
		if got := readRunID(t, c, &fs); got != run {
			t.Fatalf("fallback reported run_id %q, server has %q", got, run)
		}
	}
	if !fs.off.Load() {
		t.Fatal("functions still on after FUNCTION LOAD was refused")
	}
	if libs := libraries(t, admin); len(libs) != 0 {
		t.Fatalf("libraries loaded: %v", libs)
	}
	if _, infos := serverState(t, admin); infos < 3+1 {
		t.Fatalf("%d INFO calls, want one per script run (3) plus the test's", infos)
	}
}
