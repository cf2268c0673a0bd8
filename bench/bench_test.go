package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
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
// as a separate process would have. The commands it sends are counted in
// sent.
func newClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c.AddHook(countHook{})
	if err := c.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis %s: %v", addr, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// sent counts the commands this process's go-redis clients send (each
// command of a pipeline, a script's EVALSHA as one). The server's own count,
// total_commands_processed, also counts every command a script runs, so a
// window needs both to say what the clients asked for.
var sent atomic.Int64

// countHook counts what a client sends (sent) and times a contender's
// commands (roundTrips).
type countHook struct{}

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent.Add(1)
		return timed(ctx, func() error { return next(ctx, cmd) })
	}
}

func (countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent.Add(int64(len(cmds)))
		return timed(ctx, func() error { return next(ctx, cmds) })
	}
}

// roundTrips times one contender's commands, through a value in the
// contexts it passes (countHook reads it): the last command of its wait,
// the one that won the lock, and the sum of its release's.
type roundTrips struct {
	lastRT, releaseRT atomic.Int64 // ns
}

type roundTripsKey struct{}

// roundTripsMark is the context value: whose, and in which phase.
type roundTripsMark struct {
	rt      *roundTrips
	release bool
}

// withRoundTrips returns ctx marked for the wait phase of a new roundTrips.
func withRoundTrips(ctx context.Context) (context.Context, *roundTrips) {
	rt := &roundTrips{}
	return context.WithValue(ctx, roundTripsKey{}, &roundTripsMark{rt: rt}), rt
}

// releasing returns ctx marked for a release, whose sum starts at 0.
func (rt *roundTrips) releasing(ctx context.Context) context.Context {
	rt.releaseRT.Store(0)
	return context.WithValue(ctx, roundTripsKey{}, &roundTripsMark{rt: rt, release: true})
}

func (rt *roundTrips) last() time.Duration     { return time.Duration(rt.lastRT.Load()) }
func (rt *roundTrips) released() time.Duration { return time.Duration(rt.releaseRT.Load()) }

// timed runs next and records its round trip where ctx says.
func timed(ctx context.Context, next func() error) error {
	m, _ := ctx.Value(roundTripsKey{}).(*roundTripsMark)
	if m == nil {
		return next()
	}
	start := time.Now()
	err := next()
	d := int64(time.Since(start))
	if m.release {
		m.rt.releaseRT.Add(d)
	} else {
		m.rt.lastRT.Store(d)
	}
	return err
}

// sentNames is a hook that records the names of the commands a client
// sends, so that the server's per-command times (cmdStats) can be
// summed over them. A script's EVALSHA is one name; the server counts the
// commands the script runs under their own names as well, and includes
// their time in the EVALSHA's, so only what the client sent is summed.
type sentNames struct {
	mu    sync.Mutex
	names map[string]bool
	calls map[string]float64 // how many of each were sent
}

func (h *sentNames) add(name string) {
	h.mu.Lock()
	if h.names == nil {
		h.names, h.calls = map[string]bool{}, map[string]float64{}
	}
	h.names[name] = true
	h.calls[name]++
	h.mu.Unlock()
}

// sent returns how many commands named name were sent.
func (h *sentNames) sent(name string) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[name]
}

func (h *sentNames) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.names))
}

func (h *sentNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *sentNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.add(cmd.Name())
		}
		return next(ctx, cmds)
	}
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

// serverStats are counters from the server's INFO stats.
type serverStats struct {
	reads    int64 // total_reads_processed: requests read, i.e. round trips (a pipeline is one)
	commands int64 // total_commands_processed: including those that scripts run
}

// stats reads c's server's INFO stats. The INFO itself is among the reads
// it reports, and among the commands of the next call's report.
func stats(tb testing.TB, c *redis.Client) serverStats {
	info := infoFields(tb, c, "stats")
	return serverStats{reads: info.int(tb, "total_reads_processed"), commands: info.int(tb, "total_commands_processed")}
}

// info is one INFO reply's fields by name.
type info map[string]string

func infoFields(tb testing.TB, c *redis.Client, section string) info {
	s, err := c.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	fields := info{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

func (i info) int(tb testing.TB, name string) int64 {
	n, err := strconv.ParseInt(i[name], 10, 64)
	if err != nil {
		tb.Fatalf("INFO %s: %v", name, err)
	}
	return n
}

func (i info) float(tb testing.TB, name string) float64 {
	f, err := strconv.ParseFloat(i[name], 64)
	if err != nil {
		tb.Fatalf("INFO %s: %v", name, err)
	}
	return f
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
