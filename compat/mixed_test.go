package compat_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
)

// A mixed fleet makes progress: for 4s (8s on five nodes), two dlock
// processes, two redsync workers and two node-redlock processes contend
// for one key, each with its
// own library's default waiting (dlock: a wake-up on release, else a poll
// every 50-100ms; redsync: 32 tries 50-250ms apart; node-redlock: 10 retries
// 200ms ± 200ms apart, and 30 on five nodes, where with 10 it ran out of them
// in 2 of 4 runs against redsync alone, without dlock, because it leaves the
// keys of a split vote to expire), on one node (dlock's redislock) and on
// five (redlock). Each works 5ms outside the lock between its 2ms sections, so
// the lock is wanted more than all the time. No worker runs out of its retry
// window, each completes sections, no two holders overlap, and the test
// reports each library's share and its longest wait. On five nodes the
// three libraries' attempts can split the vote again and again, and
// nobody at all entered for the first 5.4s of one CI run (8 sections in
// 4s, where a run has about 300): node-redlock and redsync leave no queue
// to break such ties, so the run there is long enough to outlast one.
func TestMixedFleet(t *testing.T) {
	node := nodeRedlock(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("%dnodes", n), func(t *testing.T) {
			rs := shared[:n]
			var addrs []string
			for _, r := range rs {
				addrs = append(addrs, r.Addr)
			}
			dir := t.TempDir()
			key := lockcheck.Key(t)
			retries := "10" // node-redlock's default
			if n > 1 {
				retries = "30"
			}
			const each = 2
			run := 4 * time.Second
			if n > 1 {
				run = 8 * time.Second // room for a stall of split votes
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			// Everyone begins together, once the processes are up.
			begin := monotonicNS() + int64(3*time.Second)
			start := fmt.Sprintf("%s=%d", startEnv, begin)
			deadline := fmt.Sprintf("%s=%d", deadlineEnv, begin+int64(run))
			// Each worker works 10ms outside the lock between its 2ms
			// sections: together the six want the lock all the time.
			const think = 10 * time.Millisecond
			thinkVar := fmt.Sprintf("%s=%d", thinkEnv, think.Milliseconds())
			var wg sync.WaitGroup
			errs := make(chan error, 3*each)
			for i := range each {
				cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
				cmd.Env = append(os.Environ(), helperDefaultsEnv+"=1", start, deadline, thinkVar,
					helperEnv+"="+helperSpec{addrs, key, dir, fmt.Sprintf("dlock%d", i), 0}.String())
				wg.Go(func() {
					if out, err := cmd.CombinedOutput(); err != nil {
						errs <- fmt.Errorf("dlock process: %v\n%s", err, out)
					}
				})
				js := exec.CommandContext(ctx, node, "contend.js", strings.Join(addrs, ","), key, "0", dir, fmt.Sprintf("node%d", i), retries)
				js.Dir = "testdata"
				js.Env = append(os.Environ(), start, deadline, thinkVar)
				wg.Go(func() {
					if out, err := js.CombinedOutput(); err != nil {
						errs <- fmt.Errorf("node-redlock process (ran out of its retries?): %v\n%s", err, out)
					}
				})
				pools := make([]redsyncredis.Pool, len(rs))
				for j, r := range rs {
					pools[j] = goredis.NewPool(client(t, r.Addr))
				}
				// redsync polls (32 tries by default, 50-250ms apart) while dlock's
				// waiters are woken by each release: under this contention a
				// redsync worker may go 5s without a turn. It must not give up
				// within the run; what is checked is that nobody overlaps.
				mu := redsync.New(pools...).NewMutex(key, redsync.WithExpiry(2*time.Second), redsync.WithTries(1000))
				name := fmt.Sprintf("redsync%d", i)
				wg.Go(func() {
					for monotonicNS() < begin {
						time.Sleep(time.Millisecond)
					}
					for monotonicNS() < begin+int64(run) {
						if err := mu.LockContext(ctx); err != nil {
							errs <- fmt.Errorf("redsync worker (ran out of its tries?): %v", err)
							return
						}
						err := criticalSection(dir, name, 0)
						if _, uerr := mu.UnlockContext(ctx); err == nil && uerr != nil {
							err = uerr
						}
						if err != nil {
							errs <- fmt.Errorf("redsync worker: %v", err)
							return
						}
						time.Sleep(think)
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
			var workers []string
			for _, lib := range []string{"dlock", "node", "redsync"} {
				for i := range each {
					workers = append(workers, fmt.Sprintf("%s%d", lib, i))
				}
			}
			report(t, checkLog(t, dir, -1), workers, begin, think)
		})
	}
}

// report logs each library's share of the sections and its longest wait
// (from the start, or from the end of a worker's think time after its
// previous section, to the next section), and fails the test unless every
// worker completed sections.
func report(t *testing.T, ivs []interval, workers []string, begin int64, think time.Duration) {
	t.Helper()
	ready := map[string]int64{} // when each worker began to want the lock
	for _, w := range workers {
		ready[w] = begin
	}
	count := map[string]int{}
	shares := map[string]int{}
	longest := map[string]time.Duration{}
	for _, iv := range ivs {
		lib := strings.TrimRight(iv.who, "0123456789")
		count[iv.who]++
		shares[lib]++
		longest[lib] = max(longest[lib], time.Duration(iv.enter-ready[iv.who]))
		ready[iv.who] = iv.exit + int64(think)
	}
	for _, w := range workers {
		if count[w] == 0 {
			t.Errorf("%s completed %d sections", w, count[w])
		}
	}
	libs := slices.Sorted(maps.Keys(shares))
	for _, lib := range libs {
		t.Logf("%-8s %3d of %d sections (%3.0f%%), longest wait %v", lib, shares[lib], len(ivs), 100*float64(shares[lib])/float64(len(ivs)), longest[lib].Round(time.Millisecond))
	}
}
