package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testsrv"
)

// ttl is the lease every benchmark asks for: long against every wait, so
// that no lock in a benchmark ever expires.
const ttl = 10 * time.Second

var (
	redisAddr    string   // A, C, D
	redlockAddrs []string // B
	window       = 2 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if w := os.Getenv("BENCH_WINDOW"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			fmt.Fprintln(os.Stderr, "BENCH_WINDOW:", err)
			return 2
		}
		window = d
	}
	// go-redis's own log lines would split the benchmark's result lines,
	// which benchtable parses.
	redis.SetLogger(quietRedisLogger{})
	redisAddr = os.Getenv("BENCH_REDIS")
	if s := os.Getenv("BENCH_REDLOCK"); s != "" {
		redlockAddrs = strings.Split(s, ",")
	}
	// Without servers from run.sh, start our own.
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	start := func() (string, error) {
		dir, err := os.MkdirTemp("", "dlock-bench")
		if err != nil {
			return "", err
		}
		r, err := testsrv.NewRedis(dir)
		if err != nil {
			return "", err
		}
		stops = append(stops, func() { r.Stop(); os.RemoveAll(dir) })
		return r.Addr, nil
	}
	if redisAddr == "" {
		a, err := start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		redisAddr = a
	}
	if len(redlockAddrs) == 0 {
		for range 5 {
			a, err := start()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			redlockAddrs = append(redlockAddrs, a)
		}
	}
	code := m.Run()
	if pgStop != nil {
		pgStop()
	}
	return code
}

// newClient returns a go-redis client of its own (its own connection pool),
// as a separate process would have.
func newClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	if err := c.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis %s: %v", addr, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

var keySeq atomic.Int64

// freshKey returns a key no earlier benchmark used.
func freshKey(prefix string) string {
	return fmt.Sprintf("bench:%s:%d:%d", prefix, os.Getpid(), keySeq.Add(1))
}

// token is the raw baselines' lock value: 128 random bits, hex-encoded, as
// dlock's and the peers' tokens are.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rawRelease is the classic compare-and-delete, run by SHA.
var rawRelease = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

// reads returns the server's total_reads_processed: the number of requests
// it read, i.e. round trips (a pipeline is one).
func reads(tb testing.TB, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no total_reads_processed in INFO stats")
	return 0
}

// pct returns the p-th percentile (0..100) of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency adds p50/p99 of per-cycle durations and cycles per second.
func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(us(pct(lat, 50)), "p50-us")
	b.ReportMetric(us(pct(lat, 99)), "p99-us")
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}
