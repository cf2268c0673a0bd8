package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// helperEnv makes the test binary act as a small `dlock demo` for the
// Ctrl-C test: Run under a context cancelled by SIGINT/SIGTERM, as the CLI
// does.
const helperEnv = "DLOCK_DEMO_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	// Killed Redlock nodes make go-redis log every failed dial.
	redis.SetLogger(quietLogger{})
	// Where no etcd binary is on PATH the etcd scenario runs embedded
	// servers, whose peer connections close a moment after they stop.
	testsrv.VerifyTestMain(m, 10*time.Second)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func helperMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var out bytes.Buffer
	err := Run(ctx, io.MultiWriter(os.Stdout, &out), Options{})
	// Report what is left before exiting: after exit the servers would
	// die anyway (Pdeathsig), which would hide a missing cleanup.
	fmt.Printf("\nleftover redis-server processes: %d\n", len(redisProcesses(ports(out.String()))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func run(t *testing.T, opts Options) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	err := Run(ctx, &out, opts)
	t.Logf("Run took %v; output:\n%s", time.Since(start), out.String())
	return out.String(), err
}

// checkClaims asserts the key lines of every scenario.
func checkClaims(t *testing.T, out string) {
	t.Helper()
	plain, checked, ok := strings.Cut(out, "Released with dlock's token-checked release")
	if !ok {
		t.Fatalf("no token-checked half in scenario 2")
	}
	_, plain, _ = strings.Cut(plain, "Released with a plain DEL")
	mustMatch(t, plain, `C acquires while B is still inside its critical section:\s+true\n`)
	mustMatch(t, plain, `B still holds the lock:\s+false\n`)
	mustMatch(t, plain, `A releases with DEL:\s+deleted 1 key \(B's lock\)\n`)
	checked, _, _ = strings.Cut(checked, "\n3. ")
	mustMatch(t, checked, `A releases with its token:\s+refused \(ErrNotHeld\)\n`)
	mustMatch(t, checked, `C acquires while B is still inside its critical section:\s+false\n`)
	mustMatch(t, checked, `B still holds the lock:\s+true\n`)

	mustMatch(t, out, `B acquires while A holds it:\s+false \(ErrNotAcquired\)\n`)
	mustMatch(t, out, `release with the token "wrong-token":\s+refused \(ErrNotHeld\)\n`)
	mustMatch(t, out, `A releases with its own token:\s+ok\n`)
	mustMatch(t, out, `(Lua|DELEX) release with the token "nope":\s+refused \(ErrNotHeld\)\n`)
	mustMatch(t, out, `(Lua|DELEX) release with the holder's token:\s+ok\n`)
	mustMatch(t, out, `B writes with fence (\d+):\s+accepted\n`)
	mustMatch(t, out, `A wakes up and writes with fence (\d+):\s+rejected`)
	mustMatch(t, out, `value of the resource:\s+"B"\n`)
	mustMatch(t, out, `max inside the critical section at once:\s+1\n`)
	mustMatch(t, out, `acquire with 5 of 5 nodes up:\s+ok`)
	mustMatch(t, out, `acquire with 3 of 5 nodes up:\s+ok`)
	mustMatch(t, out, `extend with 3 of 5 nodes up:\s+ok`)
	mustMatch(t, out, `B tries while A holds it \(3 of 5 up\):\s+false \(ErrNotAcquired\)`)
	// Fewer than a majority answered: redlock says unavailable, not busy.
	mustMatch(t, out, `acquire with 2 of 5 nodes up:\s+refused \(ErrUnavailable\)`)
	mustMatch(t, out, `2 granted, 3 needed`)
	if strings.Contains(out, "FAILED") {
		t.Errorf("output says FAILED")
	}
	mustMatch(t, out, fmt.Sprintf(`All %d scenarios behaved as described.\n$`, len(scenarios())))
}

func mustMatch(t *testing.T, s, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(s) {
		t.Errorf("output lacks %q", pattern)
	}
}

func TestRunOnTemporaryServers(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out, err := run(t, Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	first, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(first, "temporary redis-server processes (Redis 7") {
		t.Errorf("first line %q does not say it started redis-server", first)
	}
	mustMatch(t, out, `It has neither DELEX nor SET IFEQ`)
	checkClaims(t, out)
	if ps := ports(out); len(ps) != 5 {
		t.Errorf("header names ports %v, want 5", ps)
	} else if left := redisProcesses(ps); len(left) > 0 {
		t.Errorf("redis-server processes left running: %v", left)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("temporary files left in TMPDIR: %v", left)
	}
}

// Where no redis-server is on PATH the demo runs on embedded servers whose
// TTLs expire in real time, and says so first.
func TestRunEmbeddedFallback(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := testsrv.RedisBinary(); err == nil {
		t.Fatal("redis-server still found with an empty PATH")
	}
	out, err := run(t, Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	first, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(first, "no redis-server on PATH") || !strings.Contains(out, "embedded in-process servers (miniredis") {
		t.Errorf("the output does not start by saying it runs on embedded servers:\n%s", first)
	}
	mustMatch(t, out, `It has DELEX but not SET IFEQ`)
	checkClaims(t, out)
	// No etcd on PATH either: etcd's own server runs in the process, and
	// the scenario's claims hold on it.
	mustMatch(t, out, `Three etcd servers inside this process \(no etcd on PATH\)`)
	mustMatch(t, out, `is stopped: a minority of the cluster is down`)
	mustMatch(t, out, `A extends its lock:\s+ok\n`)
	mustMatch(t, out, `A wakes up and writes with fence \d+:\s+rejected`)
	mustMatch(t, out, `\d\. etcd\s+ok`)
}

// Five user-given servers: nothing is started; losing nodes is simulated by
// cutting the demo's relay, the servers stay up, and the demo's keys are
// gone afterwards. The first URL's password never shows.
func TestRunOnGivenServers(t *testing.T) {
	const password = "s3cret-pw"
	rs := testsrv.StartRedisN(t, 5)
	// testsrv pings without a password, so set it once the server is up.
	c := newClient(rs[0].Options())
	err := c.ConfigSet(context.Background(), "requirepass", password).Err()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{"redis://:" + password + "@" + rs[0].Addr}
	for _, r := range rs[1:] {
		urls = append(urls, r.URL())
	}
	out, err := run(t, Options{RedisURLs: urls})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(out, password) {
		t.Errorf("the output shows the password")
	}
	if strings.Contains(out, "temporary redis-server") {
		t.Errorf("the demo started servers although 5 were given")
	}
	mustMatch(t, out, `dlock demo on your servers `)
	mustMatch(t, out, `cut off`)
	checkClaims(t, out)

	ctx := context.Background()
	for i, r := range rs {
		o := r.Options()
		if i == 0 {
			o.Password = password
		}
		c := newClient(o)
		n, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil {
			t.Errorf("server %d after the demo: %v", i, err)
		} else if n != 0 {
			t.Errorf("server %d keeps %d keys after the demo", i, n)
		}
	}
}

// With one server given, the other four Redlock nodes are temporary ones,
// and those are the ones the demo kills.
func TestRunOnOneGivenServer(t *testing.T) {
	r := testsrv.StartRedis(t)
	out, err := run(t, Options{RedisURLs: []string{r.URL()}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	mustMatch(t, out, `dlock demo on your server `+regexp.QuoteMeta(r.Addr))
	mustMatch(t, out, `also started 4 temporary redis-server\nprocesses`)
	mustMatch(t, out, `killed \(SIGKILL\)`)
	checkClaims(t, out)
	if left := redisProcesses(ports(out)); len(left) > 0 {
		t.Errorf("redis-server processes left running: %v", left)
	}
}

// One server given and no redis-server on PATH: the other Redlock nodes are
// embedded, and the header says so without claiming everything is.
func TestRunOnOneGivenServerEmbeddedRest(t *testing.T) {
	r := testsrv.StartRedis(t)
	t.Setenv("PATH", t.TempDir())
	out, err := run(t, Options{RedisURLs: []string{r.URL()}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	first, _, _ := strings.Cut(out, "\n")
	if first != "dlock demo on your server "+r.Addr+"." {
		t.Errorf("first line %q", first)
	}
	mustMatch(t, out, `no redis-server is on PATH, so the other 4 are\nembedded in-process servers`)
	mustMatch(t, out, `Scenarios 1-5 run on `+regexp.QuoteMeta(r.Addr)+` \(Redis 7`)
	mustMatch(t, out, `is shut down\.`)
	checkClaims(t, out)
}

// A claim that does not hold is reported on its line, in the summary and
// in Run's error, and the other scenarios still run.
func TestRunReportsFailures(t *testing.T) {
	orig := scenarios
	t.Cleanup(func() { scenarios = orig })
	scenarios = func() []scenario {
		wrong := scenario{title: "Arithmetic", short: "arithmetic", summary: "sums", proves: []string{"PROVES-ARITHMETIC"},
			run: func(ctx context.Context, e *env, s *section) error {
				s.result("one plus one", "3", false, "2")
				return nil
			}}
		broken := scenario{title: "Broken", short: "broken", summary: "breaks", proves: []string{"PROVES-BROKEN"},
			run: func(ctx context.Context, e *env, s *section) error { return errors.New("boom") }}
		return []scenario{wrong, basicScenario, broken}
	}
	out, err := run(t, Options{})
	if err == nil || !strings.Contains(err.Error(), "2 of 3 scenarios failed") {
		t.Fatalf("Run: got %v, want an error saying 2 of 3 scenarios failed", err)
	}
	mustMatch(t, out, `one plus one:\s+3   <- FAILED, expected 2\n`)
	mustMatch(t, out, `FAILED: boom\n`)
	mustMatch(t, out, `1\. arithmetic\s+FAILED`)
	mustMatch(t, out, `2\. basic acquire/release\s+ok`)
	mustMatch(t, out, `3\. broken\s+FAILED`)
	mustMatch(t, out, `2 of 3 scenarios FAILED\.\n$`)
	if strings.Contains(out, "PROVES-") {
		t.Errorf("a failed scenario still claims what it proves")
	}
	mustMatch(t, out, `B acquires while A holds it:\s+false \(ErrNotAcquired\)`)
}

// failingWriter fails like a closed pipe (`dlock demo | head`).
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// When nobody reads the output any more, Run stops after the scenario in
// progress instead of running the rest for nobody.
func TestRunStopsOnWriteError(t *testing.T) {
	start := time.Now()
	err := Run(context.Background(), failingWriter{}, Options{})
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("got %v, want EPIPE", err)
	}
	t.Logf("returned after %v", time.Since(start))
}

func TestRunBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context // the bad input under test
	if err := Run(nilCtx, io.Discard, Options{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil context: got %v, want ErrInvalid", err)
	}
	err := Run(ctx, io.Discard, Options{RedisURLs: []string{"http://user:hunter2@example.com"}})
	if !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad URL: got %v, want ErrInvalid", err)
	}
	if err != nil && strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error shows the password: %v", err)
	}
	// The first server is connected (clients, a relay goroutine) before
	// the second fails: goleak in TestMain checks that is all undone.
	r := testsrv.StartRedis(t)
	port, _ := testsrv.FreePort()
	closed := fmt.Sprintf("redis://127.0.0.1:%d", port)
	err = Run(ctx, io.Discard, Options{RedisURLs: []string{r.URL(), closed}})
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Errorf("closed port: got %v, want ErrUnavailable naming port %d", err, port)
	}
}

// signalWriter reports on a channel when the output contains a string.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	hit  chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.hit != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.hit)
		w.hit = nil
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Cancelling the context mid-scenario (what the CLI does on Ctrl-C) stops
// the demo at once and removes the servers and their files.
func TestRunCancelledCleansUp(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hit := make(chan struct{})
	w := &signalWriter{want: "Released with a plain DEL", hit: hit}
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, w, Options{}) }()
	select {
	case <-hit:
	case err := <-errc:
		t.Fatalf("Run returned before scenario 2: %v\n%s", err, w.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("scenario 2 did not start:\n%s", w.String())
	}
	ps := ports(w.String())
	if len(redisProcesses(ps)) != 5 {
		t.Fatalf("expected 5 running servers on %v before the cancel", ps)
	}
	start := time.Now()
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of the cancel")
	}
	t.Logf("Run returned %v after %v", err, time.Since(start))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if left := redisProcesses(ps); len(left) > 0 {
		t.Errorf("redis-server processes left running: %v", left)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("temporary files left in TMPDIR: %v", left)
	}
	if strings.Contains(w.String(), "FAILED") {
		t.Errorf("an interruption was reported as a failure:\n%s", w.String())
	}
}

// A real SIGINT to a process running the demo the way the CLI does.
func TestCtrlCLeavesNoServers(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	found := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "1. ") {
			found = true
			break
		}
	}
	if !found {
		t.Fatalf("the demo did not reach scenario 1:\n%s\n%s", out.String(), stderr.String())
	}
	ps := ports(out.String())
	if len(redisProcesses(ps)) != 5 {
		t.Fatalf("expected 5 running servers on %v before Ctrl-C", ps)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	err = cmd.Wait()
	t.Logf("output:\n%s\nstderr: %s", out.String(), stderr.String())
	if err == nil {
		t.Errorf("the interrupted demo exited 0")
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say the demo was interrupted")
	}
	if !strings.Contains(out.String(), "leftover redis-server processes: 0\n") {
		t.Errorf("the demo did not stop its servers before exiting")
	}
	if left := redisProcesses(ps); len(left) > 0 {
		t.Errorf("redis-server processes left running: %v", left)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("temporary files left in TMPDIR: %v", left)
	}
}

// ports returns the temporary servers' ports named in the demo's header:
// "127.0.0.1 ports P1, P2, ...;" or "127.0.0.1:P;".
func ports(out string) []int {
	m := regexp.MustCompile(`127\.0\.0\.1(?: ports ([\d, ]+)|:(\d+));`).FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	var ps []int
	for _, f := range strings.Split(m[1]+m[2], ",") {
		if p, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// redisProcesses returns the pids of live redis-server processes listening
// on one of ports, from /proc. redis-server rewrites its command line to
// "redis-server 127.0.0.1:PORT".
func redisProcesses(ports []int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(b, []byte("redis-server")) {
			continue
		}
		fields := strings.FieldsFunc(string(b), func(r rune) bool { return r == 0 || r == ' ' })
		for _, p := range ports {
			ps := strconv.Itoa(p)
			for i, f := range fields {
				if strings.HasSuffix(f, ":"+ps) || (f == "--port" && i+1 < len(fields) && fields[i+1] == ps) {
					pid, _ := strconv.Atoi(filepath.Base(d))
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

func newClient(o *redis.Options) *redis.Client { return redis.NewClient(o) }

// --timeline draws the scenarios with several clients: the plain-DEL half's
// two holders (B and C) as an unexplained overlap, the fencing scenario's
// rejected late write, the election's two leaders.
func TestRunTimeline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.svg")
	if _, err := run(t, Options{Timeline: path}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	if err := xml.Unmarshal(b, new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	for _, want := range []string{
		">2. plain DEL: C<", "B and C inside at once: A&#39;s plain DEL deleted B&#39;s lock",
		">4. fencing: A<", "rejected (ErrStale)", ">5. election: B<", ">6. worker 5<",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the timeline has no %q", want)
		}
	}
}

// TestPostgresScenario: on a temporary cluster, a session killed with
// pg_terminate_backend loses its lock to B (higher fence), its late
// fenced write is refused, its Do reports ErrLockLost, and SKIP LOCKED
// does every job exactly once, a rolled-back batch included; the cluster
// and its files are gone afterwards.
func TestPostgresScenario(t *testing.T) {
	if !postgresInstalled() {
		t.Fatal(postgresHint) // make test installs it
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	orig := scenarios
	t.Cleanup(func() { scenarios = orig })
	scenarios = func() []scenario { return []scenario{postgresScenario} }
	out, err := run(t, Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	mustMatch(t, out, `A temporary PostgreSQL cluster on 127\.0\.0\.1:\d+`)
	mustMatch(t, out, `A takes "ledger" in Do \(pg_try_advisory_lock\):\s+fence (\d+)`)
	mustMatch(t, out, `pg_locks: the session that holds it:\s+1 lock, pid \d+\n`)
	mustMatch(t, out, `B tries to take it:\s+false \(ErrNotAcquired\)\n`)
	mustMatch(t, out, `pg_terminate_backend\(\d+\)`)
	mustMatch(t, out, `B, waiting, gets the lock:\s+fence \d+ after`)
	mustMatch(t, out, `B writes the row with fence \d+ \(pgfence\):\s+accepted\n`)
	mustMatch(t, out, `A's late write with fence \d+, on another connection:\s+rejected \(ErrStale`)
	mustMatch(t, out, `value of the row:\s+"B"\n`)
	mustMatch(t, out, `A's Do: its function's context ends with:\s+ErrLockLost, `)
	mustMatch(t, out, `jobs done, and done more than once:\s+20, 0\n`)
	mustMatch(t, out, `the rolled-back batch's jobs \(\[1 2 3\]\), done later:\s+3 of 3\n`)
	mustMatch(t, out, `jobs left in the queue:\s+0\n`)
	if strings.Contains(out, "FAILED") || strings.Contains(out, postgresHint) {
		t.Errorf("the scenario FAILED, or says PostgreSQL is missing")
	}
	m := regexp.MustCompile(`PostgreSQL cluster on 127\.0\.0\.1:(\d+)`).FindStringSubmatch(out)
	if m != nil {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], time.Second); err == nil {
			c.Close()
			t.Errorf("PostgreSQL still accepts connections on port %s after the demo", m[1])
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("temporary files left in TMPDIR: %v", left)
	}
}

// Where no PostgreSQL is installed, the demo says in one line how to see
// its scenario, and runs the others.
func TestPostgresMissing(t *testing.T) {
	origInstalled, origScenarios := postgresInstalled, scenarios
	t.Cleanup(func() { postgresInstalled, scenarios = origInstalled, origScenarios })
	all := len(scenarios())
	postgresInstalled = func() bool { return false }
	if n := len(scenarios()); n != all-1 {
		t.Errorf("%d scenarios without PostgreSQL, want one fewer than %d", n, all)
	}
	scenarios = func() []scenario { return []scenario{basicScenario} }
	out, err := run(t, Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Count(out, "\n"+postgresHint+"\n") != 1 {
		t.Errorf("the output does not say once, on a line of its own: %q", postgresHint)
	}
	postgresInstalled = origInstalled
	if out, _ := run(t, Options{}); strings.Contains(out, postgresHint) {
		t.Errorf("with PostgreSQL installed the demo still says it is missing")
	}
}
