package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
)

// TestRunNameAndVerbose: on every backend, --name labels the holder record
// that the library's Inspect reads while the command runs (Redis's record,
// etcd's key value, PostgreSQL's application_name), and --verbose says in
// one line on stderr, once the lock is granted, the backend, the fence the
// command got and the holder.
func TestRunNameAndVerbose(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	backends := []struct {
		kind  string
		start func(t *testing.T) (flags []string, in dlock.Inspector)
	}{
		{"redis", func(t *testing.T) ([]string, dlock.Inspector) {
			srv := testsrv.StartRedis(t)
			l, err := redislock.New(srv.Client(t), redislock.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			return []string{"--redis", srv.URL()}, l
		}},
		{"postgres", func(t *testing.T) ([]string, dlock.Inspector) {
			pg := testsrv.StartPostgres(t)
			l, err := pglock.New(pg.Pool(t, 2), pglock.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return []string{"--postgres", pg.DSN(), "--create-fence-table"}, l
		}},
		{"etcd", func(t *testing.T) ([]string, dlock.Inspector) {
			c, cli := startEtcd(t, 1)
			l, err := etcdlock.New(cli, etcdlock.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			return []string{"--etcd", c.Endpoints()[0]}, l
		}},
	}
	for _, b := range backends {
		t.Run(b.kind, func(t *testing.T) {
			t.Parallel()
			flags, in := b.start(t)
			p, finish := startHolding(t, "named", append([]string{"--name", "nightly", "--verbose"}, flags...)...)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			infos, err := in.Inspect(ctx, "named", 0)
			if err != nil || len(infos) == 0 || infos[0].Service != "nightly" {
				t.Errorf("Inspect while dlock run --name nightly holds the lock: %+v, %v; want service nightly", infos, err)
			}
			r := finish()
			if r.code != 0 {
				t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
			}
			oneLine(t, r.stderr)
			humanLines(t, r.stderr)
			fence := parseVars(t, r.stdout)["DLOCK_FENCE"]
			for _, want := range []string{`lock "named" granted after `, "fence " + fence + ",", "on " + b.kind + " ", `name "nightly"`} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("--verbose: stderr %q does not say %q", r.stderr, want)
				}
			}
			if b.kind != "postgres" {
				host, _ := os.Hostname()
				if want := fmt.Sprintf("holder host %s, pid %d,", host, p.cmd.Process.Pid); !strings.Contains(r.stderr, want) {
					t.Errorf("--verbose: stderr %q does not say %q", r.stderr, want)
				}
			}
		})
	}
}

// TestVerboseWait: --verbose says how long run and acquire waited for the
// lock, and the fence they got; without --verbose they say nothing.
func TestVerboseWait(t *testing.T) {
	srv := testsrv.StartRedis(t)
	env := []string{"DLOCK_REDIS=" + srv.URL()}
	if r := runInProcess(t, env, "acquire", "v:held", "-t", "0.8"); r.code != 0 {
		t.Fatalf("acquire: exit %d; stderr: %s", r.code, r.stderr)
	}
	waited := regexp.MustCompile(`granted after (\S+): fence (\d+),`)
	r := runInProcess(t, env, "run", "--verbose", "-w", "10", "v:held", "true")
	m := waited.FindStringSubmatch(r.stderr)
	if r.code != 0 || m == nil {
		t.Fatalf("run --verbose: exit %d; stderr %q: want a line saying how long it waited", r.code, r.stderr)
	}
	oneLine(t, r.stderr)
	if d, err := time.ParseDuration(m[1]); err != nil || d < 400*time.Millisecond || d > r.elapsed {
		t.Errorf("run --verbose waited %q for a lock whose lease had about 0.8s left; dlock ran %v", m[1], r.elapsed)
	}
	if !strings.HasSuffix(r.stderr, fmt.Sprintf(", pid %d\n", os.Getpid())) {
		t.Errorf("run --verbose: stderr %q does not name the holder record's pid %d", r.stderr, os.Getpid())
	}

	r = runInProcess(t, env, "acquire", "--verbose", "v:acq")
	m = waited.FindStringSubmatch(r.stderr)
	if r.code != 0 || m == nil || m[2] != parseVars(t, r.stdout)["DLOCK_FENCE"] {
		t.Fatalf("acquire --verbose: exit %d, stdout %q, stderr %q: want its fence on stderr", r.code, r.stdout, r.stderr)
	}
	oneLine(t, r.stderr)
	if !strings.Contains(r.stderr, "on redis "+srv.Addr) || !strings.Contains(r.stderr, "no holder record") {
		t.Errorf("acquire --verbose: stderr %q does not name the backend and the holder record", r.stderr)
	}
	if r := runInProcess(t, env, "run", "v:quiet", "true"); r.code != 0 || r.stderr != "" {
		t.Errorf("run without --verbose: exit %d, stderr %q, want nothing", r.code, r.stderr)
	}
}
