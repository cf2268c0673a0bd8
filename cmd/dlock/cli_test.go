package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// closedURL returns a redis URL on a loopback port nobody listens on.
func closedURL(t *testing.T, userinfo string) string {
	t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("redis://%s127.0.0.1:%d", userinfo, port)
}

func TestUsageErrors(t *testing.T) {
	redisEnv := []string{"DLOCK_REDIS=" + closedURL(t, "")}
	url := closedURL(t, "")
	run := func(args ...string) []string { return append(append([]string{"run"}, args...), "k", "--", "true") }
	cases := []struct {
		name string
		env  []string
		args []string
		want string // in the one line on stderr
	}{
		{"no command", nil, nil, "missing command"},
		{"unknown command", nil, []string{"frob"}, `unknown command "frob"`},
		{"unknown flag", redisEnv, run("--frob"), "unknown flag: --frob"},
		{"run without arguments", redisEnv, []string{"run"}, "missing KEY and command"},
		{"run with KEY alone", redisEnv, []string{"run", "k"}, "missing command: dlock run KEY"},
		{"run with a dash after the command's name", redisEnv, []string{"run", "k", "git", "diff", "--", "f"}, `expected one KEY before "--", got 3 arguments`},
		{"run without key", redisEnv, []string{"run", "--", "true"}, "missing KEY"},
		{"run with two keys", redisEnv, []string{"run", "a", "b", "--", "true"}, "expected one KEY"},
		{"run without command", redisEnv, []string{"run", "k", "--"}, "missing command after"},
		{"run with empty command", redisEnv, []string{"run", "k", "--", ""}, "empty command name"},
		{"run with empty key", redisEnv, []string{"run", "", "--", "true"}, "empty lock key"},
		{"bad duration", redisEnv, run("--ttl", "soon"), `invalid argument "soon" for "-t, --ttl"`},
		{"zero ttl", redisEnv, run("--ttl", "0"), "--ttl: invalid argument: ttl 0s: must be positive"},
		{"ttl below drift margin", redisEnv, run("--ttl", "1ms"), "clock-drift margin"},
		{"negative wait", redisEnv, run("--wait", "-1s"), "--wait -1s: must not be negative"},
		{"negative grace", redisEnv, run("--grace", "-1s"), "--grace -1s"},
		{"no backend", nil, run(), "no backend"},
		{"both backend flags", nil, run("--redis", url, "--postgres", "postgres://db/x"), "choose one backend"},
		{"both backend variables", []string{"DLOCK_REDIS=" + url, "DLOCK_POSTGRES=postgres://db/x"}, run(), "choose one backend"},
		{"bad URL scheme", nil, run("--redis", "http://127.0.0.1:1"), "invalid URL scheme"},
		{"bad database", nil, run("--redis", "redis://127.0.0.1:1/x"), "invalid database number"},
		{"etcd and redis flags", nil, run("--etcd", "http://127.0.0.1:1", "--redis", url), "choose one backend"},
		{"etcd and postgres variables", []string{"DLOCK_ETCD=127.0.0.1:1", "DLOCK_POSTGRES=postgres://db/x"}, run(), "choose one backend"},
		{"empty etcd URL", nil, run("--etcd", ""), "--etcd: empty URL"},
		{"bad etcd URL scheme", nil, run("--etcd", "redis://127.0.0.1:1"), "etcd URL #1"},
		{"inspect on etcd, bad pattern", nil, []string{"inspect", "--etcd", "http://127.0.0.1:1", "["}, `pattern "["`},
		{"--name with --no-holder", redisEnv, run("--name", "nightly", "--no-holder"), "--name and --no-holder contradict"},
		{"--name not for PostgreSQL", []string{"DLOCK_POSTGRES=postgres://db/x"}, run("--name", "n\u00e4chtlich"), "--name \"n\u00e4chtlich\": invalid argument: holder service"},
		{"acquire on postgres", nil, []string{"acquire", "--postgres", "postgres://db/x", "k"}, "acquire needs Redis"},
		{"acquire bad ttl", redisEnv, []string{"acquire", "--ttl", "-5s", "k"}, "--ttl: invalid argument: ttl -5s"},
		{"acquire without key", redisEnv, []string{"acquire"}, "missing KEY"},
		{"extend without token", redisEnv, []string{"extend", "k"}, "missing TOKEN"},
		{"extend empty token", redisEnv, []string{"extend", "k", ""}, "empty token"},
		{"release extra argument", redisEnv, []string{"release", "k", "t", "x"}, "too many arguments"},
		{"release on postgres", []string{"DLOCK_POSTGRES=postgres://db/x"}, []string{"release", "k", "t"}, "release needs Redis"},
		{"inspect two patterns", redisEnv, []string{"inspect", "a", "b"}, "at most one PATTERN"},
		{"inspect negative limit", redisEnv, []string{"inspect", "--limit", "-1"}, "--limit -1"},
		{"demo arguments", nil, []string{"demo", "x"}, "unexpected arguments"},
		{"demo bad URL", nil, []string{"demo", "--redis", "nope://x"}, "invalid URL scheme"},
		{"torture arguments", nil, []string{"torture", "x"}, "unexpected arguments"},
		{"torture bad backend", nil, []string{"torture", "--backend", "zookeeper"}, `backend "zookeeper"`},
		{"torture bad fault", nil, []string{"torture", "--faults", "pause,flood"}, `fault "flood"`},
		{"torture one worker", nil, []string{"torture", "--workers", "1"}, "1 workers: want 2 to 64"},
		{"torture server fault on your server", nil, []string{"torture", "--redis", url, "--faults", "restart"}, "pass --server-faults"},
		{"torture control on the wrong backend", nil, []string{"torture", "--control", "quorum", "--backend", "redis"}, `control "quorum" runs on redlock`},
		{"torture bad URL", nil, []string{"torture", "--redis", "nope://x"}, "invalid URL scheme"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runInProcess(t, c.env, c.args...)
			if r.code != exitUsage {
				t.Fatalf("dlock %q: exit %d, want %d; stderr: %s", c.args, r.code, exitUsage, r.stderr)
			}
			oneLine(t, r.stderr)
			if !strings.HasPrefix(r.stderr, "dlock") || !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr %q: want a line from dlock containing %q", r.stderr, c.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q: want nothing", r.stdout)
			}
		})
	}
}

// TestPasswordsNeverPrinted: a password in a URL, from a flag or from the
// environment, does not appear in any message, whatever went wrong.
func TestPasswordsNeverPrinted(t *testing.T) {
	const secret = "s3cr%2Fet" // as written in the URL; decoded "s3cr/et"
	cases := []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"unreachable, flag", nil, []string{"run", "--redis", closedURL(t, ":"+secret+"@"), "k", "--", "true"}, exitUnavailable},
		{"unreachable, variable", []string{"DLOCK_REDIS=" + closedURL(t, "user:"+secret+"@")}, []string{"acquire", "k"}, exitUnavailable},
		{"bad URL", nil, []string{"run", "--redis", "redis://:" + secret + "@127.0.0.1:1/x", "k", "--", "true"}, exitUsage},
		{"unparsable URL", nil, []string{"inspect", "--redis", "redis://:" + secret + "@127.0.0.1:port"}, exitUsage},
		{"postgres DSN", nil, []string{"extend", "--postgres", "host=db password=" + secret, "k", "t"}, exitUsage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runInProcess(t, c.env, c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, c.code, r.stderr)
			}
			oneLine(t, r.stderr)
			if strings.Contains(r.stderr, secret) || strings.Contains(r.stderr, "s3cr/et") {
				t.Errorf("stderr shows the password: %q", r.stderr)
			}
		})
	}
}

// TestHelp: every command's help has examples, every flag, and the exit
// codes; the root's lists every code.
func TestHelp(t *testing.T) {
	a := &app{}
	root := a.rootCmd()
	cmds := append([]*cobra.Command{root}, root.Commands()...)
	for _, c := range cmds {
		if c.Name() == "help" || c.Hidden {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			var args []string
			if c != root {
				args = append(args, c.Name())
			}
			r := runInProcess(t, nil, append(args, "--help")...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("--help: exit %d, stderr %q", r.code, r.stderr)
			}
			for _, want := range []string{"Examples:", "Exit codes:", " 64 ", " 69 ", " 75 ", " 76 "} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("help lacks %q", want)
				}
			}
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if !strings.Contains(r.stdout, "--"+f.Name) {
					t.Errorf("help does not document --%s", f.Name)
				}
			})
		})
	}
}

func TestVersion(t *testing.T) {
	r := runInProcess(t, nil, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "dlock version ") {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestRunExitCodes runs commands under the lock in-process and checks that
// their status becomes dlock's.
func TestRunExitCodes(t *testing.T) {
	srv := testsrv.StartRedis(t)
	env := []string{"DLOCK_REDIS=" + srv.URL(), childMarker + "=1", "GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH")}
	notExec := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		command []string
		code    int
	}{
		{"success", childArgv("exit", "0"), 0},
		{"exit status", childArgv("exit", "3"), 3},
		{"exit status 75 is passed on too", childArgv("exit", "75"), 75},
		{"death by signal", []string{"/bin/sh", "-c", "kill -USR1 $$"}, 128 + 10},
		{"not found", []string{"dlock-no-such-command"}, exitNotFound},
		{"not executable", []string{notExec}, exitCannotExec},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("exitcodes:%d", i)
			r := runInProcess(t, env, append([]string{"run", key, "--"}, c.command...)...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, c.code, r.stderr)
			}
			if c.code == exitNotFound || c.code == exitCannotExec {
				oneLine(t, r.stderr)
			}
			// The lock was released: the key can be taken at once.
			if r := runInProcess(t, env, "run", key, "--", "true"); r.code != 0 {
				t.Fatalf("lock not released: the next run exits %d; stderr: %s", r.code, r.stderr)
			}
		})
	}
}

// TestExtendAndRelease: extend really moves the expiry, and release really
// deletes the key, only with the right token.
func TestExtendAndRelease(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	env := []string{"DLOCK_REDIS=" + srv.URL()}

	r := runInProcess(t, env, "acquire", "jobs:extend", "--ttl", "1s")
	if r.code != 0 {
		t.Fatalf("acquire: exit %d; stderr: %s", r.code, r.stderr)
	}
	vars := parseVars(t, r.stdout)
	if f, err := strconv.ParseUint(vars["DLOCK_FENCE"], 10, 64); vars["DLOCK_KEY"] != "jobs:extend" || err != nil || f == 0 || len(vars["DLOCK_TOKEN"]) < 16 {
		t.Fatalf("acquire printed %q", r.stdout)
	}
	if got, _ := c.Get(ctx, "jobs:extend").Result(); got != vars["DLOCK_TOKEN"] {
		t.Fatalf("key holds %q, want the printed token %q", got, vars["DLOCK_TOKEN"])
	}
	if r := runInProcess(t, env, "extend", "jobs:extend", vars["DLOCK_TOKEN"], "--ttl", "20s"); r.code != 0 {
		t.Fatalf("extend: exit %d; stderr: %s", r.code, r.stderr)
	}
	if ttl, _ := c.PTTL(ctx, "jobs:extend").Result(); ttl < 10*time.Second {
		t.Fatalf("after extend --ttl 20s the key's TTL is %v", ttl)
	}
	if r := runInProcess(t, env, "release", "jobs:extend", "someone-else"); r.code != exitLost {
		t.Fatalf("release with a wrong token: exit %d, want %d", r.code, exitLost)
	}
	if n, _ := c.Exists(ctx, "jobs:extend").Result(); n != 1 {
		t.Fatal("a release with a wrong token deleted the lock")
	}
	if r := runInProcess(t, env, "release", "jobs:extend", vars["DLOCK_TOKEN"]); r.code != 0 {
		t.Fatalf("release: exit %d; stderr: %s", r.code, r.stderr)
	}
	if n, _ := c.Exists(ctx, "jobs:extend").Result(); n != 0 {
		t.Fatal("release left the key")
	}
	if r := runInProcess(t, env, "extend", "jobs:extend", vars["DLOCK_TOKEN"]); r.code != exitLost {
		t.Fatalf("extend after release: exit %d, want %d", r.code, exitLost)
	}
}

// parseVars reads the NAME=value lines that acquire prints.
func parseVars(t *testing.T, out string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok {
			t.Fatalf("not an export NAME=value line: %q", sc.Text())
		}
		vars[k] = strings.Trim(v, "'")
	}
	return vars
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"billing":     "billing",
		"jobs:42/a-b": "jobs:42/a-b",
		"":            "''",
		"a b":         "'a b'",
		"it's":        `'it'\''s'`,
		"$(rm -rf /)": "'$(rm -rf /)'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// A server that answers with an error is reported as what it said: an ACL
// that allows the lock keys but not dlock's gets NOPERM, and the message
// names the key patterns dlock needs. With those patterns the same user
// runs the command.
func TestServerErrorReported(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~locks:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	env := []string{"DLOCK_REDIS=redis://app:pw@" + srv.Addr}
	r := runInProcess(t, env, "run", "locks:nightly", "--", "true")
	if r.code != exitMisconfigured {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitMisconfigured, r.stderr)
	}
	oneLine(t, r.stderr)
	for _, want := range []string{"NOPERM", "~dlock:*", "&dlock:wake:*"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not mention %s", r.stderr, want)
		}
	}
	if strings.Contains(r.stderr, "unreachable") {
		t.Errorf("stderr %q calls an answering server unreachable", r.stderr)
	}
	if n := c.Exists(ctx, "locks:nightly").Val(); n != 0 {
		t.Errorf("the failed attempt left the lock key behind")
	}
	if err := c.Do(ctx, "ACL", "SETUSER", "app", "resetchannels", "~dlock:*", "&dlock:wake:*").Err(); err != nil {
		t.Fatal(err)
	}
	if r := runInProcess(t, env, "run", "--wait", "1s", "locks:nightly", "--", "true"); r.code != 0 {
		t.Fatalf("with ~dlock:* and &dlock:wake:*: exit %d; stderr: %s", r.code, r.stderr)
	}
}

// A new three-node Redlock deployment with one node down from the start
// grants the lock through dlock run, with or without --wait.
func TestRunRedlockNodeDownFromStart(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	rs[2].Kill()
	args := []string{"--redis", rs[0].URL(), "--redis", rs[1].URL(), "--redis", rs[2].URL()}
	for _, wait := range []string{"0", "2s"} {
		r := runInProcess(t, nil, append(append([]string{"run"}, args...), "--wait", wait, "jobs:redlock", "--", "true")...)
		if r.code != 0 {
			t.Fatalf("--wait %s with node 3 of 3 down: exit %d; stderr: %s", wait, r.code, r.stderr)
		}
	}
}

// The CLI's exit code follows the one sentinel of an error: one table from
// sentinel to exit code, for acquisitions and for the token commands.
func TestExitCodeBySentinel(t *testing.T) {
	code := func(err error) int {
		var ee *exitError
		var ue *usageError
		var be *busyError
		switch {
		case errors.As(err, &be):
			return exitBusy
		case errors.As(err, &ee):
			return ee.code
		case errors.As(err, &ue):
			return exitUsage
		}
		return -1
	}
	wrap := func(s error) error { return fmt.Errorf("dlock: acquire \"k\": %w (detail)", s) }
	busy := &recorder{sawBusy: true}
	for _, tc := range []struct {
		sentinel      error
		acquire, toke int
	}{
		{dlock.ErrInvalid, exitUsage, exitUsage},
		{dlock.ErrUnavailable, exitUnavailable, exitUnavailable},
		{dlock.ErrMisconfigured, exitMisconfigured, exitMisconfigured},
		{dlock.ErrNotAcquired, exitBusy, exitFailure},
		{dlock.ErrNotHeld, exitFailure, exitLost},
		{dlock.ErrLockLost, exitFailure, exitLost},
	} {
		if got := code(acquireError(wrap(tc.sentinel), busy, "k", 0, time.Second)); got != tc.acquire {
			t.Errorf("acquire failing with %v: exit %d, want %d", tc.sentinel, got, tc.acquire)
		}
		if got := code(tokenError(wrap(tc.sentinel), "k")); got != tc.toke {
			t.Errorf("extend/release failing with %v: exit %d, want %d", tc.sentinel, got, tc.toke)
		}
	}
}

// TestEveryBackendNamed: every text that lists the backends (help, the
// errors about the backend choice, the package doc's opening) names etcd
// with Redis and PostgreSQL.
func TestEveryBackendNamed(t *testing.T) {
	texts := map[string]string{}
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"acquire", "--help"}, {"inspect", "--help"}} {
		texts[strings.Join(args, " ")] = runInProcess(t, nil, args...).stdout
	}
	pg := []string{"DLOCK_POSTGRES=postgres://db/x"}
	for name, c := range map[string]struct {
		env  []string
		args []string
	}{
		"no backend":       {nil, []string{"run", "k", "--", "true"}},
		"two backends":     {append(pg, "DLOCK_REDIS=redis://127.0.0.1:1"), []string{"run", "k", "--", "true"}},
		"acquire postgres": {pg, []string{"acquire", "k"}},
		"release postgres": {pg, []string{"release", "k", "t"}},
	} {
		r := runInProcess(t, c.env, c.args...)
		if r.code != exitUsage {
			t.Fatalf("%s: exit %d, want %d; stderr: %s", name, r.code, exitUsage, r.stderr)
		}
		texts[name] = r.stderr
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	texts["doc.go's opening"], _, _ = strings.Cut(string(doc), "\n//\n")
	for name, text := range texts {
		for _, backend := range []string{"Redis", "PostgreSQL", "etcd"} {
			if !strings.Contains(strings.ToLower(text), strings.ToLower(backend)) {
				t.Errorf("%s does not name %s:\n%s", name, backend, text)
			}
		}
	}
}

// A backend that refuses for a reason waiting cannot fix (a wrong
// password) makes every subcommand exit 78 at once, before --wait runs
// out, with the server's reason on one line.
func TestMisconfiguredExits(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	env := []string{"DLOCK_REDIS=redis://:wrong@" + srv.Addr, "DLOCK_TOKEN=x"}
	for _, args := range [][]string{
		{"run", "-w", "2s", "k", "--", "true"},
		{"run", "-w", "2s", "--no-holder", "k", "--", "true"},
		{"acquire", "-w", "2s", "k"},
		{"extend", "k"},
		{"release", "k"},
		{"inspect"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitMisconfigured || r.elapsed >= 2*time.Second || !strings.Contains(r.stderr, "WRONGPASS") {
			t.Errorf("dlock %q with a wrong password: exit %d after %v, want %d at once with the server's reason; stderr: %s",
				args, r.code, r.elapsed.Round(time.Millisecond), exitMisconfigured, r.stderr)
		}
		oneLine(t, r.stderr)
	}
}
