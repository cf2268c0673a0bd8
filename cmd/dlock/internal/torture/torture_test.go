package torture

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// workerEnv makes the test binary a torture worker (see TestMain).
const workerEnv = "DLOCK_TORTURE_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(WorkerMain(os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

func workerCmd() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A race-enabled binary sleeps a second at exit (for late reports);
	// a worker that stops must stop at once.
	cmd.Env = append(os.Environ(), workerEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return cmd
}

// run runs cfg with the test binary as worker and logs the run.
func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	var log bytes.Buffer
	cfg.Worker, cfg.Log = workerCmd, &log
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+2*time.Minute)
	defer cancel()
	r, err := Run(ctx, cfg)
	if r != nil {
		r.Print(&log)
	}
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return r
}

// caught says whether a negative control's run shows the violation its
// flaw must cause, not just any: for the lock's flaws, two holders granted
// the lock at once with no fault to explain it (an unexplained overrun, a
// holder acting after its validity ended, can be the machine's scheduling).
func caught(control string, r *Report) bool {
	switch control {
	case ControlNoFence:
		return r.BelowAccepted > 0 || r.Linearizable == "illegal"
	case ControlGTE:
		return r.SameFence > 0
	}
	for _, o := range r.Overlaps {
		if o.Reason == "" && o.Entered.Grant <= o.Inside.believed() {
			return true
		}
	}
	return false
}

// controlSeeds is how many seeded runs TestNegativeControls makes of each
// control: 10 in CI, DLOCK_TORTURE_SEEDS (e.g. 20) for a longer sweep.
func controlSeeds(t *testing.T) int {
	v := os.Getenv("DLOCK_TORTURE_SEEDS")
	if v == "" {
		return 10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("DLOCK_TORTURE_SEEDS=%q: want a count of runs", v)
	}
	return n
}

// TestNegativeControls shows that the checker can fail: each negative
// control must be reported unsafe, for the reason its flaw causes, in every
// seeded run but one per twenty, rounded up (9 of 10, 19 of 20), and the same
// schedule with the flaw switched off must pass.
func TestNegativeControls(t *testing.T) {
	seeds := controlSeeds(t)
	for _, control := range Controls {
		t.Run(control, func(t *testing.T) {
			if r := run(t, Config{Control: control, ControlOff: true, Seed: 1}); !r.Safe() {
				t.Errorf("the control's schedule with its flaw off was reported unsafe")
			}
			// Two runs at a time: a run spends most of its time waiting.
			var mu sync.Mutex
			var missed []int64
			next := make(chan int64)
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					for seed := range next {
						if r := runQuiet(t, Config{Control: control, Seed: seed}); !caught(control, r) {
							t.Logf("seed %d missed: %d sections, %d overlaps (%v), errors %v, problems %q", seed, r.Completed, len(r.Overlaps), r.Explained, r.Errors, r.Problems)
							mu.Lock()
							missed = append(missed, seed)
							mu.Unlock()
						}
					}
				})
			}
			for seed := range int64(seeds) {
				next <- seed + 1
			}
			close(next)
			wg.Wait()
			slices.Sort(missed)
			n, want := seeds-len(missed), max(1, seeds-(seeds+19)/20)
			t.Logf("negative control %s caught in %d of %d seeded runs (missed: %v)", control, n, seeds, missed)
			if n < want {
				t.Errorf("caught in %d of %d runs, want at least %d", n, seeds, want)
			}
		})
	}
}

func runQuiet(t *testing.T, cfg Config) *Report {
	t.Helper()
	cfg.Worker = workerCmd
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Errorf("Run %s seed %d: %v", cfg.Control, cfg.Seed, err)
		return &Report{Linearizable: "ok"} // counts as missed
	}
	return r
}

// The CI runs: a minute per backend (etcd included), fixed seeds, every fault the backend
// can get (and for Redlock the loss of a majority too), and then 30s
// of a semaphore of 2 permits per backend (holders killed among the faults), each
// group at once (a run spends most of its time waiting; go test would run only
// GOMAXPROCS parallel subtests at a time). Each must end SAFE, and must
// have done enough for that to mean something; a semaphore's permits must
// never stay unused longer than two TTLs while someone waits, beyond the
// faults (a killed holder's is free a TTL after the kill at the latest; a
// permit that never came back would stay unused to the end of the run).
// The semaphore runs restart killed workers, which under -race on a
// loaded machine costs them sections: 45 in 30s at load average 17.
func TestTorture(t *testing.T) {
	cases := []struct {
		backend string
		faults  []string
		hold    time.Duration
		limit   int
		report  *Report
		log     bytes.Buffer
		err     error
	}{
		{backend: Redis},
		{backend: Redlock, faults: append(DefaultFaults(Redlock, true), FaultMajority)},
		{backend: Postgres},
		// etcd's shortest lease makes its TTL 1s: shorter holds give as
		// many sections in the minute as the others'.
		{backend: Etcd, hold: 300 * time.Millisecond},
		{backend: Redis, limit: 2},
		{backend: Redlock, limit: 2, faults: append(DefaultFaults(Redlock, true), FaultMajority)},
		{backend: Postgres, limit: 2},
		{backend: Etcd, limit: 2, hold: 300 * time.Millisecond},
	}
	svg := filepath.Join(t.TempDir(), "redis.svg") // one picture, to check it is drawn
	// The locks' runs, then the semaphores': eight runs at once would
	// leave each too little of a two-core machine.
	for _, semaphores := range []bool{false, true} {
		var wg sync.WaitGroup
		for i := range cases {
			tc := &cases[i]
			if (tc.limit > 0) != semaphores {
				continue
			}
			wg.Go(func() {
				cfg := Config{Backend: tc.backend, Faults: tc.faults, Hold: tc.hold, Duration: time.Minute, Seed: 20, Worker: workerCmd, Log: &tc.log}
				if tc.limit > 0 {
					cfg.Limit, cfg.Workers, cfg.Duration = tc.limit, 6, 30*time.Second
				} else if tc.backend == Redis {
					cfg.Timeline = svg
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				tc.report, tc.err = Run(ctx, cfg)
			})
		}
		wg.Wait()
	}
	for i := range cases {
		tc := &cases[i]
		name := tc.backend
		if tc.limit > 0 {
			name += "-semaphore"
		}
		t.Run(name, func(t *testing.T) {
			if tc.report != nil {
				tc.report.Print(&tc.log)
			}
			t.Log("\n" + tc.log.String())
			switch r := tc.report; {
			case tc.err != nil:
				t.Fatalf("Run: %v", tc.err)
			case !r.Safe():
				t.Errorf("unsafe: see the verdict above")
			case tc.limit == 0 && (r.Completed < 100 || len(r.Faults) < 10), tc.limit > 0 && (r.Completed < 30 || len(r.Faults) < 5):
				t.Errorf("%d sections and %d faults: too little happened for the verdict to mean much", r.Completed, len(r.Faults))
			case tc.limit > 0 && r.LongestGap > 2*r.TTL:
				t.Errorf("a permit stayed unused for %v while someone waited, beyond the faults: longer than two TTLs", r.LongestGap)
			}
			if tc.backend == Redis && tc.limit == 0 {
				b, err := os.ReadFile(svg)
				if err != nil || xml.Unmarshal(b, new(struct{})) != nil || !bytes.Contains(b, []byte(">worker 3<")) {
					t.Errorf("the timeline %s was not drawn (%v)", svg, err)
				}
			}
		})
	}
}

// electionBackends are the backends TestElectionTorture runs on.
var electionBackends = []string{Redis, Redlock, Postgres, Etcd}

// The election scenario in CI: 25s per backend, all at once, with every
// fault the backend can get. Each must end SAFE: besides the lock's
// checks, no observer went back to a lower term, named a leader after its
// term ended or under another's identity, or missed a stretch with
// nobody leading; and each must have measured hand-offs.
func TestElectionTorture(t *testing.T) {
	reports := make([]*Report, len(electionBackends))
	logs := make([]bytes.Buffer, len(electionBackends))
	errs := make([]error, len(electionBackends))
	var wg sync.WaitGroup
	for i, backend := range electionBackends {
		wg.Go(func() {
			cfg := Config{Backend: backend, Election: true, Duration: 25 * time.Second, Seed: 36, Worker: workerCmd, Log: &logs[i]}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			reports[i], errs[i] = Run(ctx, cfg)
		})
	}
	wg.Wait()
	checked := 0
	for i, backend := range electionBackends {
		t.Run(backend, func(t *testing.T) {
			if reports[i] != nil {
				reports[i].Print(&logs[i])
			}
			t.Log("\n" + logs[i].String())
			switch r := reports[i]; {
			case errs[i] != nil:
				t.Fatalf("Run: %v", errs[i])
			case !r.Safe():
				t.Errorf("unsafe: see the verdict above")
			case r.Completed < 10 || r.Election.Reports == 0 || len(r.Election.AfterResign) == 0:
				t.Errorf("%d terms, %d reports, %d hand-offs: too little happened for the verdict to mean much",
					r.Completed, r.Election.Reports, len(r.Election.AfterResign))
			default:
				checked += r.Election.NobodyChecked
			}
		})
	}
	if checked == 0 && !t.Failed() {
		t.Errorf("no stretch with nobody leading was checked on any backend")
	}
}
