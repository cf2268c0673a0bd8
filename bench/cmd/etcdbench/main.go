// Command etcdbench measures etcdlock against etcd's own
// concurrency.Mutex on the same 3-member cluster, in one run, and prints
// the comparison (issue 26, item 6): an uncontended acquire+release cycle
// by one goroutine, and the contended hand-off rate of 16 goroutines on one
// key. It starts its own etcd members (the etcd binary on PATH, Debian's
// etcd-server) on free loopback ports and stops them on exit. Usage, from
// the repository root:
//
//	go run ./bench/cmd/etcdbench [-n 2000] [-block 25] [-window 5s] [-passes 5]
//
// Both sides take a lease with the lock's TTL and share it between
// cycles: etcdlock a lease per Locker session (see its package doc), a
// Mutex a concurrency.Session's. The uncontended table shows the Mutex
// twice: on one long-lived session (put and delete: 2 Raft commits per
// cycle, as etcdlock's), which is like for like and the target's
// reference, and on a session per lock (grant, put, delete, revoke: 4),
// for scale. In the contended group each Mutex waiter keeps one session;
// etcdlock's 16 goroutines share one Locker, whose acquisitions of the one
// key take a lease each, reused from cycle to cycle: 2 commits per
// hand-off on either side.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
)

const ttl = 10 * time.Second

func main() {
	n := flag.Int("n", 1000, "uncontended cycles per pass")
	window := flag.Duration("window", 3*time.Second, "each contended window")
	passes := flag.Int("passes", 5, "passes over both groups, interleaved; the tables show medians")
	waiters := flag.Int("waiters", 16, "goroutines on one key in the contended group")
	block := flag.Int("block", 25, "uncontended cycles in a row of one implementation, taking turns")
	flag.Parse()

	dir, err := os.MkdirTemp("", "etcdbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	eps, stop, err := startCluster(dir, 3)
	defer stop()
	if err != nil {
		log.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	l, err := etcdlock.New(cli, etcdlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	uncNames := []string{"etcdlock", "Mutex, session per lock", "Mutex, one session"}
	unc := map[string][]float64{}   // µs per cycle
	ratio := map[string][]float64{} // its µs per cycle over etcdlock's, per pass
	con := map[string][]float64{}   // hand-offs per second
	for p := range *passes {
		// A key per implementation: a session per lock leaves a deleted
		// key per cycle under its name (until a compaction), which every
		// read of that queue walks.
		key := func(impl int) string { return fmt.Sprintf("bench/u%d-%d", p, impl) }
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			log.Fatal(err)
		}
		m := concurrency.NewMutex(s, key(2))
		us := cycles(*n, *block, p, []func() error{
			func() error {
				lock, err := l.TryAcquire(ctx, key(0), ttl)
				if err != nil {
					return err
				}
				return lock.Release(ctx)
			},
			func() error {
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
				if err != nil {
					return err
				}
				m := concurrency.NewMutex(s, key(1))
				if err := m.TryLock(ctx); err != nil {
					s.Close()
					return err
				}
				if err := m.Unlock(ctx); err != nil {
					s.Close()
					return err
				}
				return s.Close() // revokes the lease
			},
			func() error {
				if err := m.TryLock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			},
		})
		s.Close()
		for i, name := range uncNames {
			unc[name] = append(unc[name], us[i])
			ratio[name] = append(ratio[name], us[i]/us[0])
		}

		ckey := fmt.Sprintf("bench/c%d", p)
		con["etcdlock"] = append(con["etcdlock"], contended(*waiters, *window, func(int) (func() error, func()) {
			return func() error {
				lock, err := dlock.Acquire(ctx, l, ckey, ttl)
				if err != nil {
					return err
				}
				return lock.Release(ctx)
			}, func() {}
		}))
		con["Mutex"] = append(con["Mutex"], contended(*waiters, *window, func(int) (func() error, func()) {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
			if err != nil {
				log.Fatal(err)
			}
			m := concurrency.NewMutex(s, ckey)
			return func() error {
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			}, func() { s.Close() }
		}))
	}

	fmt.Printf("# etcdlock against concurrency.Mutex (3-member etcd cluster, %s, GOMAXPROCS %d)\n\n", etcdVersion(), gomaxprocs())
	fmt.Printf("Medians of %d interleaved passes.\n\n", *passes)
	fmt.Printf("Uncontended acquire+release, one goroutine, %d cycles of each per pass, in turns of %d:\n\n", *n, *block)
	fmt.Println("| implementation | µs per cycle | etcdlock's speed relative to it (median of the passes' own) |")
	fmt.Println("|---|---:|---:|")
	for _, name := range uncNames {
		fmt.Printf("| %s | %.0f | %.2fx |\n", name, median(unc[name]), median(ratio[name]))
	}
	fmt.Printf("\nContended hand-off, %d goroutines on one key, %v windows:\n\n", *waiters, *window)
	fmt.Println("| implementation | hand-offs per second | etcdlock's rate relative to it |")
	fmt.Println("|---|---:|---:|")
	ce := median(con["etcdlock"])
	for _, name := range []string{"etcdlock", "Mutex"} {
		v := median(con[name])
		fmt.Printf("| %s | %.0f | %.2fx |\n", name, v, ce/v)
	}
	fmt.Println()
	check := func(what string, ok bool, got string) {
		mark := "met"
		if !ok {
			mark = "NOT met"
		}
		fmt.Printf("- target %s: %s (%s)\n", what, mark, got)
	}
	ms := median(ratio["Mutex, one session"])
	check("uncontended >= 0.95x of the Mutex (like for like: a shared lease)", ms >= 0.95, fmt.Sprintf("%.2fx", ms))
	check("contended no slower than the Mutex", ce/median(con["Mutex"]) >= 1, fmt.Sprintf("%.2fx", ce/median(con["Mutex"])))
}

// cycles runs each of fs n times, taking turns in blocks of block calls
// (the first turn rotating with pass), so that every implementation meets
// the same moments of a shared machine; it returns µs per call of each.
func cycles(n, block, pass int, fs []func() error) []float64 {
	spent := make([]time.Duration, len(fs))
	for done := 0; done < n; done += block {
		for j := range fs {
			i := (j + pass) % len(fs)
			start := time.Now()
			for range min(block, n-done) {
				if err := fs[i](); err != nil {
					log.Fatal(err)
				}
			}
			spent[i] += time.Since(start)
		}
	}
	us := make([]float64, len(fs))
	for i, d := range spent {
		us[i] = float64(d.Microseconds()) / float64(n)
	}
	return us
}

// contended runs w goroutines, each looping over its setup's function
// (take the lock, release it at once) for window, and returns the
// acquisitions per second.
func contended(w int, window time.Duration, setup func(i int) (func() error, func())) float64 {
	var count atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	start := make(chan struct{})
	for i := range w {
		f, done := setup(i)
		wg.Go(func() {
			defer done()
			<-start
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := f(); err != nil {
					log.Fatal(err)
				}
				count.Add(1)
			}
		})
	}
	t0 := time.Now()
	close(start)
	time.Sleep(window)
	n := count.Load()
	el := time.Since(t0)
	close(stop)
	wg.Wait()
	return float64(n) / el.Seconds()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

func etcdVersion() string {
	out, err := exec.Command("etcd", "--version").Output()
	if err != nil {
		return "etcd"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCluster starts n etcd members with default timings and returns
// their client URLs once the cluster answers.
func startCluster(dir string, n int) ([]string, func(), error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, func() {}, fmt.Errorf("etcd not found on PATH (apt-get install etcd-server)")
	}
	var eps, peers, initial []string
	for i := range n {
		eps = append(eps, fmt.Sprintf("http://127.0.0.1:%d", freePort()))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", freePort()))
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()
		}
	}
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("m%d", i))
		cmd := exec.Command(bin, "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(d, "data"),
			"--listen-client-urls", eps[i], "--advertise-client-urls", eps[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--log-outputs", filepath.Join(dir, fmt.Sprintf("m%d.log", i)), "--logger", "zap")
		cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=")
		if err := cmd.Start(); err != nil {
			return nil, stop, err
		}
		cmds = append(cmds, cmd)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		return nil, stop, err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(ctx, "bench/ready", "1")
		cancel()
		if err == nil {
			return eps, stop, nil
		}
		if time.Now().After(deadline) {
			return nil, stop, fmt.Errorf("etcd cluster not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
