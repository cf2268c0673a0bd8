package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/cmd/dlock/internal/etcdsrv"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// electBackends are the backends the election tests run on: the
// environment or flags that name each, started for the test.
func electBackends(t *testing.T) map[string][]string {
	pg := testsrv.StartPostgres(t)
	if err := pg.Exec(context.Background(), "CREATE SEQUENCE IF NOT EXISTS dlock_fence"); err != nil {
		t.Fatal(err)
	}
	c, err := etcdsrv.Start(context.Background(), t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	var redlock []string
	for _, s := range testsrv.StartRedisN(t, 3) {
		redlock = append(redlock, "--redis", s.URL())
	}
	return map[string][]string{
		"redis":    redlock[:2],
		"redlock":  redlock,
		"postgres": {"--postgres", pg.DSN()},
		"etcd":     {"--etcd", c.Endpoints()[0]},
	}
}

// watcher is a running `dlock leader -w --json`.
type watcher struct{ p *proc }

func watchLeader(t *testing.T, flags []string, name string) *watcher {
	w := &watcher{}
	w.p = startBin(t, binEnv(), append(append([]string{"leader", "-w", "--json"}, flags...), name)...)
	return w
}

// lines parses what the watcher printed so far.
func (w *watcher) lines(t *testing.T) []termJSON {
	var out []termJSON
	sc := bufio.NewScanner(strings.NewReader(w.p.outSoFar()))
	for sc.Scan() {
		var j termJSON
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			t.Fatalf("leader -w --json printed %q: %v", sc.Text(), err)
		}
		out = append(out, j)
	}
	return out
}

// await waits until the watcher's last line is want (a leader's identity,
// "" for nobody).
func (w *watcher) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if l := w.lines(t); len(l) > 0 && l[len(l)-1].Leader == want && l[len(l)-1].Led == (want != "") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("leader -w did not come to %q within 20s; printed:\n%s", want, w.p.outSoFar())
}

// candidate starts `dlock elect --id ID` whose command (the child role
// "lead") records its term in out and runs until the file id.go exists.
func candidate(t *testing.T, flags []string, name, id, out string, extra ...string) (*proc, string) {
	goOn := filepath.Join(filepath.Dir(out), id+".go")
	args := append(append(append([]string{"elect", "--id", id, "-t", "2s"}, extra...), flags...), name, "--")
	return startBin(t, binEnv(), append(args, childArgv("lead", out, goOn)...)...), goOn
}

// terms reads what the candidates' commands recorded: their terms, by
// identity, in the order they began.
func terms(t *testing.T, out string) (ids []string, fences []uint64) {
	b, _ := os.ReadFile(out)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var term, fence uint64
		var id string
		if line == "" {
			continue
		}
		if _, err := fmt.Sscan(line, &term, &id, &fence); err != nil || term != fence || term == 0 {
			t.Fatalf("a command saw DLOCK_TERM DLOCK_LEADER DLOCK_FENCE %q", line)
		}
		ids, fences = append(ids, id), append(fences, term)
	}
	return ids, fences
}

// awaitTerms waits until n terms were recorded in out. It fails at once,
// with its stderr, when the candidate that should lead (next) exited.
func awaitTerms(t *testing.T, out string, n int, next *proc) ([]string, []uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ids, fences := terms(t, out)
		if len(ids) >= n {
			return ids, fences
		}
		select {
		case <-next.done:
			t.Fatalf("the candidate due to lead term %d exited %d before it led: %s", n, next.res.code, next.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d terms recorded within 20s, want %d: %v; the next candidate's stderr so far: %q", len(ids), n, ids, next.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestElectAndLeader: on every backend, dlock leader says nobody leads
// (exit 3); a candidate leads, and its command gets its term; leader names
// it; a second candidate waits, and leads at once when the first's command
// exits (resigning); a third takes over from the second when the second
// dlock is SIGKILLed; and leader -w printed every one of them in order,
// with nobody at the end, terms only growing.
func TestElectAndLeader(t *testing.T) {
	t.Parallel()
	for backend, flags := range electBackends(t) {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			name := "elect:" + backend
			r := runBin(t, binEnv(), append(append([]string{"leader"}, flags...), name)...)
			if r.code != exitNobody || r.stdout != fmt.Sprintf("nobody leads %q\n", name) {
				t.Fatalf("leader of a new election: exit %d, stdout %q, stderr %q; want %d and nobody", r.code, r.stdout, r.stderr, exitNobody)
			}
			w := watchLeader(t, flags, name)
			w.await(t, "")
			out := filepath.Join(t.TempDir(), "terms")

			a, goA := candidate(t, flags, name, "alpha", out)
			_, fences := awaitTerms(t, out, 1, a)
			r = runBin(t, binEnv(), append(append([]string{"leader"}, flags...), name)...)
			if want := fmt.Sprintf("alpha leads %q in term %d", name, fences[0]); r.code != 0 || !strings.HasPrefix(r.stdout, want) {
				t.Fatalf("leader: exit %d, stdout %q; want %q", r.code, r.stdout, want)
			}
			w.await(t, "alpha")

			b, goB := candidate(t, flags, name, "beta", out)
			time.Sleep(300 * time.Millisecond) // beta campaigns
			if err := os.WriteFile(goA, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			resigned := time.Now()
			if r := a.wait(t); r.code != 0 {
				t.Fatalf("alpha: exit %d, stderr %s", r.code, r.stderr)
			}
			awaitTerms(t, out, 2, b)
			t.Logf("%s: beta led %v after alpha's command exited", backend, time.Since(resigned).Round(time.Millisecond))
			w.await(t, "beta")

			c, goC := candidate(t, flags, name, "gamma", out)
			time.Sleep(300 * time.Millisecond) // gamma campaigns
			killed := time.Now()
			b.cmd.Process.Kill()
			b.wait(t)
			awaitTerms(t, out, 3, c)
			t.Logf("%s: gamma led %v after beta's dlock was killed (ttl 2s)", backend, time.Since(killed).Round(time.Millisecond))
			w.await(t, "gamma")
			os.WriteFile(goB, nil, 0o644) // nobody runs it now
			if err := os.WriteFile(goC, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if r := c.wait(t); r.code != 0 {
				t.Fatalf("gamma: exit %d, stderr %s", r.code, r.stderr)
			}
			w.await(t, "")

			ids, fences := terms(t, out)
			if strings.Join(ids, " ") != "alpha beta gamma" || fences[1] <= fences[0] || fences[2] <= fences[1] {
				t.Fatalf("terms %v of %v: want alpha, beta, gamma, growing", fences, ids)
			}
			var last uint64
			for _, j := range w.lines(t) {
				if j.Name != name || j.Led && j.Term <= last {
					t.Fatalf("leader -w printed %+v after term %d:\n%s", j, last, w.p.outSoFar())
				}
				if j.Led {
					last = j.Term
				}
			}
		})
	}
}

// TestElectLoss: a leadership lost (its key deleted) ends the command and
// exits 76, as dlock run does; with --recampaign elect campaigns again and
// runs the command anew in a higher term; -n exits 75 while another leads.
func TestElectLoss(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	flags := []string{"--redis", srv.URL()}
	c := srv.Client(t)
	for _, recampaign := range []bool{false, true} {
		t.Run(fmt.Sprintf("recampaign=%v", recampaign), func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("elect:loss:%v", recampaign)
			out := filepath.Join(t.TempDir(), "terms")
			var extra []string
			if recampaign {
				extra = []string{"--recampaign"}
			}
			p, goOn := candidate(t, flags, name, "solo", out, extra...)
			_, first := awaitTerms(t, out, 1, p)
			if r := runBin(t, binEnv(), append(append([]string{"elect", "-n"}, flags...), name, "true")...); r.code != exitBusy {
				t.Fatalf("elect -n while another leads: exit %d, want %d; stderr %s", r.code, exitBusy, r.stderr)
			}
			if err := c.Del(context.Background(), name).Err(); err != nil {
				t.Fatal(err)
			}
			if !recampaign {
				if r := p.wait(t); r.code != exitLost || !strings.Contains(r.stderr, "lost") {
					t.Fatalf("exit %d, want %d; stderr %s", r.code, exitLost, r.stderr)
				}
				return
			}
			_, fences := awaitTerms(t, out, 2, p)
			if fences[1] <= first[0] {
				t.Fatalf("the second term %d is not above the first %d", fences[1], first[0])
			}
			if err := os.WriteFile(goOn, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if r := p.wait(t); r.code != 0 || !strings.Contains(r.stderr, "lost") {
				t.Fatalf("exit %d, want 0 after the second term's command exited; stderr %s", r.code, r.stderr)
			}
		})
	}
}

// TestElectUsage: elect and leader refuse what they cannot run.
func TestElectUsage(t *testing.T) {
	t.Parallel()
	env := []string{"DLOCK_REDIS=" + closedURL(t, "")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"elect"}, "missing NAME and command: dlock elect NAME"},
		{[]string{"elect", "job"}, "missing command: dlock elect NAME"},
		{[]string{"elect", "--id", "", "job", "true"}, "empty identity"},
		{[]string{"leader"}, "want one election NAME, got 0"},
		{[]string{"leader", "a", "b"}, "want one election NAME, got 2"},
	} {
		r := runInProcess(t, env, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
}
