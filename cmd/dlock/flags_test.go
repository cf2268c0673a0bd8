package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestLockFlags covers each flock(1)-style flag and each exit code, in every
// subcommand it applies to, against a real Redis where another owner holds
// "busy".
func TestLockFlags(t *testing.T) {
	srv := testsrv.StartRedis(t)
	env := []string{"DLOCK_REDIS=" + srv.URL(), "PATH=/usr/bin:/bin"}
	held := runInProcess(t, env, "acquire", "busy", "-t", "1m")
	if held.code != 0 {
		t.Fatalf("acquire busy: exit %d; stderr: %s", held.code, held.stderr)
	}
	token := parseVars(t, held.stdout)["DLOCK_TOKEN"]
	withToken := append(append([]string{}, env...), "DLOCK_TOKEN="+token)
	down := []string{"DLOCK_REDIS=" + closedURL(t, ""), "DLOCK_TOKEN=x"}

	const silent, says = "", "busy"
	cases := []invocation{
		// The cron line of dlock run --help.
		{"run cron example", env, []string{"run", "-n", "-q", "-E", "0", "busy", "--", "true"}, 0, silent, 0},
		{"run busy", env, []string{"run", "busy", "--", "true"}, exitBusy, says, 0},
		{"run -n", env, []string{"run", "-n", "busy", "--", "true"}, exitBusy, says, 0},
		{"run --nonblock", env, []string{"run", "--nonblock", "busy", "--", "true"}, exitBusy, says, 0},
		{"run -E", env, []string{"run", "-E", "3", "busy", "--", "true"}, 3, says, 0},
		{"run --conflict-exit-code", env, []string{"run", "--conflict-exit-code=9", "busy", "--", "true"}, 9, says, 0},
		{"run -E 0 without -q says so", env, []string{"run", "-E", "0", "busy", "--", "true"}, 0, says, 0},
		{"run -q", env, []string{"run", "-q", "busy", "--", "true"}, exitBusy, silent, 0},
		{"run -w", env, []string{"run", "-w", "300ms", "busy", "--", "true"}, exitBusy, says, 300 * time.Millisecond},
		{"run --wait -q", env, []string{"run", "--wait", "300ms", "-q", "busy", "--", "true"}, exitBusy, silent, 300 * time.Millisecond},
		{"run -t", env, []string{"run", "-t", "5s", "free1", "--", "true"}, 0, silent, 0},
		{"run -c", env, []string{"run", "-c", `test "$DLOCK_KEY" = free2`, "free2"}, 0, silent, 0},
		{"run -c keeps the command's 75", env, []string{"run", "-E", "0", "-q", "-c", "exit 75", "free3"}, 75, silent, 0},
		{"run -c busy", env, []string{"run", "-n", "-q", "-E", "0", "-c", "exit 1", "busy"}, 0, silent, 0},
		{"run -c and --", env, []string{"run", "-c", "true", "free4", "--", "true"}, exitUsage, "exclude each other", 0},
		{"run -c without key", env, []string{"run", "-c", "true"}, exitUsage, "missing KEY", 0},
		{"run -n with --wait", env, []string{"run", "-n", "-w", "1s", "busy", "--", "true"}, exitUsage, "contradict", 0},
		{"run -E out of range", env, []string{"run", "-E", "256", "busy", "--", "true"}, exitUsage, "0..255", 0},
		{"run -t 0", env, []string{"run", "-t", "0", "k", "--", "true"}, exitUsage, "--ttl", 0},
		{"run unreachable", down, []string{"run", "-q", "k", "--", "true"}, exitUnavailable, "unreachable", 0},
		{"run unreachable -E 0", down, []string{"run", "-E", "0", "k", "--", "true"}, exitUnavailable, "unreachable", 0},

		{"acquire busy", env, []string{"acquire", "busy"}, exitBusy, says, 0},
		{"acquire -n -q -E", env, []string{"acquire", "-n", "-q", "-E", "7", "busy"}, 7, silent, 0},
		{"acquire -w", env, []string{"acquire", "-w", "300ms", "busy"}, exitBusy, says, 300 * time.Millisecond},
		{"acquire -n with --wait", env, []string{"acquire", "-n", "--wait", "1s", "busy"}, exitUsage, "contradict", 0},
		{"acquire unreachable", down, []string{"acquire", "-q", "k"}, exitUnavailable, "unreachable", 0},

		{"extend with DLOCK_TOKEN", withToken, []string{"extend", "busy", "-t", "2m"}, 0, silent, 0},
		{"extend with a token argument", env, []string{"extend", "busy", token, "--ttl", "2m"}, 0, silent, 0},
		{"extend wrong DLOCK_TOKEN", append(env[:1:1], "DLOCK_TOKEN=wrong"), []string{"extend", "busy"}, exitLost, "not held", 0},
		{"extend no token", env, []string{"extend", "busy"}, exitUsage, "DLOCK_TOKEN", 0},
		{"extend unreachable", down, []string{"extend", "k"}, exitUnavailable, "unreachable", 0},
		{"release wrong DLOCK_TOKEN", append(env[:1:1], "DLOCK_TOKEN=wrong"), []string{"release", "busy"}, exitLost, "not held", 0},
		{"release no token", env, []string{"release", "busy"}, exitUsage, "DLOCK_TOKEN", 0},
		{"release too many", env, []string{"release", "busy", "a", "b"}, exitUsage, "too many", 0},
		{"release unreachable", down, []string{"release", "k"}, exitUnavailable, "unreachable", 0},
	}
	runCases(t, cases)

	// acquire's output, evaluated, lets release go without a token argument.
	if r := runInProcess(t, withToken, "release", "busy"); r.code != 0 {
		t.Fatalf("release with DLOCK_TOKEN: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runInProcess(t, env, "run", "-n", "busy", "--", "true"); r.code != 0 {
		t.Fatalf("after release, run on busy: exit %d; stderr: %s", r.code, r.stderr)
	}
}

// TestSilentServerBounded: a server that accepts TCP and never answers ends
// every subcommand with 69 within its bound (--wait, or the URL's timeouts).
func TestSilentServerBounded(t *testing.T) {
	srv := testsrv.StartRedis(t)
	p, err := tcpproxy.New("", srv.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Blackhole(true)
	url := "redis://" + p.Addr + "/0?dial_timeout=500ms&read_timeout=500ms&write_timeout=500ms"
	env := []string{"DLOCK_REDIS=" + url, "DLOCK_TOKEN=x"}
	for _, args := range [][]string{
		{"run", "-w", "1s", "k", "--", "true"},
		{"run", "-n", "k", "--", "true"},
		{"acquire", "-w", "1s", "k"},
		{"acquire", "k"},
		{"extend", "k"},
		{"release", "k"},
	} {
		r := runInProcess(t, env, args...)
		// 1s of --wait or 500ms timeouts; 10s is the margin of a loaded
		// 2-core machine, far below a hang.
		if r.code != exitUnavailable || r.elapsed > 10*time.Second {
			t.Errorf("%q on a silent server: exit %d after %v, want %d; stderr: %s", args, r.code, r.elapsed, exitUnavailable, r.stderr)
		}
	}
}

// TestFlockHabits: the command takes what flock(1) users type: plain
// seconds for -w and -t (fractions too), --nb, the command without "--"
// (flags after its name are its own), -w forever, and a Redis address
// without redis://, in a flag or in DLOCK_REDIS.
func TestFlockHabits(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	env := []string{"DLOCK_REDIS=" + srv.URL(), "PATH=/usr/bin:/bin"}
	if r := runInProcess(t, env, "acquire", "busy", "-t", "60"); r.code != 0 {
		t.Fatalf("acquire busy -t 60: exit %d; stderr: %s", r.code, r.stderr)
	}
	if ttl := c.PTTL(ctx, "busy").Val(); ttl <= 50*time.Second || ttl > time.Minute {
		t.Fatalf("acquire -t 60: the key's TTL is %v, want 60s", ttl)
	}

	cases := []invocation{
		{"run -w in seconds", env, []string{"run", "-w", "1", "busy", "--", "true"}, exitBusy, "busy", time.Second},
		{"run -w a fraction", env, []string{"run", "-w", "0.3", "busy", "--", "true"}, exitBusy, "busy", 300 * time.Millisecond},
		{"run -w with a unit", env, []string{"run", "-w", "300ms", "busy", "--", "true"}, exitBusy, "busy", 300 * time.Millisecond},
		{"run -t in seconds", env, []string{"run", "-t", "5", "habit:t", "--", "true"}, 0, "", 0},
		{"run --grace in seconds", env, []string{"run", "-t", "9", "--grace", "1.5", "habit:g", "--", "true"}, 0, "", 0},
		{"run --nb", env, []string{"run", "--nb", "busy", "--", "true"}, exitBusy, "busy", 0},
		{"run --nb with -w", env, []string{"run", "--nb", "-w", "1", "busy", "--", "true"}, exitUsage, "contradict", 0},
		{"run -n with -w forever", env, []string{"run", "-n", "-w", "forever", "busy", "true"}, exitUsage, "-n and --wait forever contradict", 0},
		{"run without --", env, []string{"run", "habit:nodash", "true"}, 0, "", 0},
		{"run without --: the command's flags are its own", env, []string{"run", "habit:own", "sh", "-c", "exit 3"}, 3, "", 0},
		{"run without --: flags before the command are dlock's", env, []string{"run", "busy", "-n", "-q", "-E", "0", "sh", "-c", "exit 3"}, 0, "", 0},
		{"run without --: a command named like a flag value", env, []string{"run", "-w", "0", "habit:w0", "true", "-w", "5"}, 0, "", 0},
		{"run -- keeps working after flags", env, []string{"run", "habit:dash", "-t", "5", "--", "sh", "-c", "exit 4"}, 4, "", 0},
		{"run KEY alone", env, []string{"run", "habit:alone"}, exitUsage, "missing command", 0},
		{"run KEY and flags alone", env, []string{"run", "habit:alone", "-n"}, exitUsage, "missing command", 0},
		{"run, a -- after the command's name", env, []string{"run", "a", "b", "--", "true"}, exitUsage, "expected one KEY", 0},
		{"run, -c and a command", env, []string{"run", "-c", "true", "habit:c", "true"}, exitUsage, "expected one KEY with -c", 0},
		{"run -w bad", env, []string{"run", "-w", "soon", "habit:bad", "true"}, exitUsage, "want seconds (5, 0.5), a duration (1m30s) or forever", 0},
		{"run -t forever", env, []string{"run", "-t", "forever", "habit:bad", "true"}, exitUsage, "want seconds (30, 0.5) or a duration", 0},
		{"run -w out of range", env, []string{"run", "-w", "99999999999", "habit:bad", "true"}, exitUsage, "out of range", 0},
		{"run -w negative", env, []string{"run", "-w", "-1", "habit:bad", "true"}, exitUsage, "--wait -1s: must not be negative", 0},
		{"run --redis host:port", nil, []string{"run", "--redis", srv.Addr, "habit:addr", "true"}, 0, "", 0},
		{"run DLOCK_REDIS=host:port", []string{"DLOCK_REDIS=" + srv.Addr}, []string{"run", "habit:addr", "true"}, 0, "", 0},
		{"acquire -w in seconds", env, []string{"acquire", "-w", "0.3", "busy"}, exitBusy, "busy", 300 * time.Millisecond},
		{"acquire --nb", env, []string{"acquire", "--nb", "busy"}, exitBusy, "busy", 0},
		{"acquire --redis host:port", nil, []string{"acquire", "--redis", srv.Addr, "-n", "busy"}, exitBusy, "busy", 0},
	}
	runCases(t, cases)

	// extend -t takes seconds too.
	r := runInProcess(t, env, "acquire", "habit:ext", "-t", "2.5")
	if r.code != 0 {
		t.Fatalf("acquire -t 2.5: exit %d; stderr: %s", r.code, r.stderr)
	}
	if ttl := c.PTTL(ctx, "habit:ext").Val(); ttl <= 0 || ttl > 2500*time.Millisecond {
		t.Fatalf("acquire -t 2.5: the key's TTL is %v", ttl)
	}
	token := parseVars(t, r.stdout)["DLOCK_TOKEN"]
	if r := runInProcess(t, env, "extend", "habit:ext", token, "-t", "90"); r.code != 0 {
		t.Fatalf("extend -t 90: exit %d; stderr: %s", r.code, r.stderr)
	}
	if ttl := c.PTTL(ctx, "habit:ext").Val(); ttl <= 80*time.Second {
		t.Fatalf("extend -t 90: the key's TTL is %v", ttl)
	}

	// -w forever waits past any finite habit: here until the holder's
	// lease (1s) runs out.
	if r := runInProcess(t, env, "acquire", "habit:forever", "-t", "1"); r.code != 0 {
		t.Fatalf("acquire -t 1: exit %d; stderr: %s", r.code, r.stderr)
	}
	left := c.PTTL(ctx, "habit:forever").Val()
	r = runInProcess(t, env, "run", "-w", "forever", "habit:forever", "true")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("run -w forever: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	if r.elapsed < left-100*time.Millisecond {
		t.Fatalf("run -w forever ran after %v, while the holder's lease had %v left", r.elapsed, left)
	}
}

// invocation is a row of a table of dlock invocations, in-process: the
// exit code it must give, what stderr says ("" wants it empty; otherwise a
// substring), and how long it must take at least (its --wait).
type invocation struct {
	name   string
	env    []string
	args   []string
	code   int
	stderr string
	minDur time.Duration
}

func runCases(t *testing.T, cases []invocation) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runInProcess(t, c.env, c.args...)
			if r.code != c.code {
				t.Fatalf("%q: exit %d, want %d; stderr: %s", c.args, r.code, c.code, r.stderr)
			}
			if c.stderr == "" && r.stderr != "" {
				t.Fatalf("%q: stderr %q, want none", c.args, r.stderr)
			}
			if c.stderr != "" && !strings.Contains(r.stderr, c.stderr) {
				t.Fatalf("%q: stderr %q, want it to say %q", c.args, r.stderr, c.stderr)
			}
			if r.elapsed < c.minDur {
				t.Fatalf("%q: returned after %v, before its --wait %v", c.args, r.elapsed, c.minDur)
			}
		})
	}
}
