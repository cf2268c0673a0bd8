package torture

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
	cmd.Env = append(os.Environ(), workerEnv+"=1")
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

func TestSmoke(t *testing.T) {
	r := run(t, Config{Backend: Redis, Workers: 3, Duration: 6 * time.Second, Seed: 1, Faults: []string{FaultPause}})
	if !r.Safe() {
		t.Fatal("unsafe")
	}
}
