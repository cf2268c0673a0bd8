//go:build linux

package compat_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
)

// A helper process is this test binary run again with DLOCK_REDLOCK_HELPER
// set: it takes the lock ROUNDS times, and inside the lock does a slow
// read-modify-write of a counter file and appends its enter and exit times
// to a log. Overlapping holders lose increments and show up in the log.
const helperEnv = "DLOCK_REDLOCK_HELPER"

// helperDefaultsEnv makes a helper wait with dlock's default retry options
// instead of polling every 5-15ms.
const helperDefaultsEnv = "DLOCK_REDLOCK_HELPER_DEFAULTS"

func helperMain() bool {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		return false
	}
	if err := runHelper(spec); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

type helperSpec struct {
	addrs  []string
	key    string
	dir    string
	name   string
	rounds int
}

func (s helperSpec) String() string {
	return strings.Join([]string{strings.Join(s.addrs, ","), s.key, s.dir, s.name, strconv.Itoa(s.rounds)}, "|")
}

func parseSpec(v string) (helperSpec, error) {
	f := strings.Split(v, "|")
	if len(f) != 5 {
		return helperSpec{}, fmt.Errorf("bad spec %q", v)
	}
	n, err := strconv.Atoi(f[4])
	return helperSpec{addrs: strings.Split(f[0], ","), key: f[1], dir: f[2], name: f[3], rounds: n}, err
}

func runHelper(v string) error {
	s, err := parseSpec(v)
	if err != nil {
		return err
	}
	var cs []redis.UniversalClient
	for _, a := range s.addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer c.Close()
		cs = append(cs, c)
	}
	var l dlock.Locker
	if len(cs) == 1 {
		l, err = redislock.New(cs[0])
	} else {
		l, err = redlock.New(cs, redlock.WithNodeTimeout(500*time.Millisecond))
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitForStart()
	retry := []dlock.Option{dlock.WithRetryDelay(5 * time.Millisecond), dlock.WithRetryJitter(10 * time.Millisecond)}
	if os.Getenv(helperDefaultsEnv) != "" {
		retry = nil // dlock's own defaults, as a user's program would have them
	}
	for i := 0; s.rounds > 0 && i < s.rounds || s.rounds == 0 && !pastDeadline(); {
		err := dlock.Do(ctx, l, s.key, 2*time.Second, func(ctx context.Context) error {
			return criticalSection(s.dir, s.name, dlock.LockFromContext(ctx).Fence())
		}, retry...)
		switch {
		case err == nil:
			i++
			think()
		case errors.Is(err, dlock.ErrUnavailable) && ctx.Err() == nil:
			// Nodes too slow on this busy machine: not entered, try again.
		default:
			return err
		}
	}
	return nil
}

// startEnv, if set, is when a helper begins (CLOCK_MONOTONIC, ns), so that
// helpers started one after another begin together.
const startEnv = "START_NS"

// thinkEnv, if set, is how long (ms) a helper works outside the lock
// between rounds.
const thinkEnv = "THINK_MS"

func think() {
	ms, _ := strconv.Atoi(os.Getenv(thinkEnv))
	time.Sleep(time.Duration(ms) * time.Millisecond)
}

// deadlineEnv, with rounds 0, is when a helper stops (CLOCK_MONOTONIC, ns).
const deadlineEnv = "DEADLINE_NS"

func pastDeadline() bool {
	d, _ := strconv.ParseInt(os.Getenv(deadlineEnv), 10, 64)
	return monotonicNS() >= d
}

func waitForStart() {
	start, _ := strconv.ParseInt(os.Getenv(startEnv), 10, 64)
	for monotonicNS() < start {
		time.Sleep(time.Millisecond)
	}
}

// criticalSection increments the counter file slowly and logs the interval.
func criticalSection(dir, name string, fence uint64) error {
	enter := monotonicNS()
	path := filepath.Join(dir, "counter")
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	time.Sleep(2 * time.Millisecond) // widen the window a second holder would hit
	if err := os.WriteFile(path, []byte(strconv.Itoa(n+1)), 0o644); err != nil {
		return err
	}
	exit := monotonicNS()
	return appendLine(filepath.Join(dir, "log"), fmt.Sprintf("%s %d %d %d", name, enter, exit, fence))
}

// monotonicNS reads CLOCK_MONOTONIC, the clock node-redlock's contender
// (testdata/contend.js, process.hrtime) reads too: one clock for every
// process on the machine, unlike wall-clock readings, which Node derives
// from a start-up offset that can be a few milliseconds off and made
// back-to-back sections of two processes look overlapped.
func monotonicNS() int64 {
	const clockMonotonic = 1 // CLOCK_MONOTONIC on Linux
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line + "\n")
	return err
}

type interval struct {
	who         string
	enter, exit int64
	fence       uint64
}

// checkLog parses the log and fails the test on any overlap between
// two holders or any fence that did not grow with time, and unless it holds
// want sections (any number for a negative want).
func checkLog(t *testing.T, dir string, want int) []interval {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	var ivs []interval
	for line := range strings.Lines(string(b)) {
		var iv interval
		if _, err := fmt.Sscanf(line, "%s %d %d %d", &iv.who, &iv.enter, &iv.exit, &iv.fence); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		ivs = append(ivs, iv)
	}
	if want < 0 {
		want = len(ivs) // as many as were logged
	}
	if len(ivs) != want {
		t.Fatalf("%d critical sections logged, want %d", len(ivs), want)
	}
	sortIntervals(ivs)
	var last interval // the last holder with a fence (node-redlock has none)
	for i, iv := range ivs {
		if i > 0 && iv.enter < ivs[i-1].exit {
			t.Errorf("overlap: %+v and %+v", ivs[i-1], iv)
		}
		if iv.fence != 0 {
			if iv.fence <= last.fence {
				t.Errorf("fence did not grow: %+v then %+v", last, iv)
			}
			last = iv
		}
	}
	c, _ := os.ReadFile(filepath.Join(dir, "counter"))
	if got := strings.TrimSpace(string(c)); got != strconv.Itoa(want) {
		t.Errorf("counter file %s after %d locked increments: increments were lost to overlapping holders", got, want)
	}
	return ivs
}

func sortIntervals(ivs []interval) {
	for i := 1; i < len(ivs); i++ {
		for j := i; j > 0 && ivs[j].enter < ivs[j-1].enter; j-- {
			ivs[j], ivs[j-1] = ivs[j-1], ivs[j]
		}
	}
}

func TestProcessesExclude(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var addrs []string
	for _, r := range shared {
		addrs = append(addrs, r.Addr)
	}
	key := lockcheck.Key(t)
	const procs, rounds = 4, 25
	var cmds []*exec.Cmd
	for i := range procs {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+helperSpec{addrs, key, dir, fmt.Sprintf("p%d", i), rounds}.String())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper process: %v", err)
		}
	}
	checkLog(t, dir, procs*rounds)
}
