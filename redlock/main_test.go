package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// shared are five redis-servers for the tests that do not kill nodes.
var shared []*testsrv.Redis

func TestMain(m *testing.M) {
	if testsrv.FuzzWorker() {
		os.Exit(m.Run()) // the fuzz targets need no server
	}
	// go-redis logs every refused dial; the tests kill nodes on purpose.
	redis.SetLogger(quietRedisLogger{})
	dir, err := os.MkdirTemp("", "redlock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := range 5 {
		d := fmt.Sprintf("%s/%d", dir, i)
		os.Mkdir(d, 0o755)
		r, err := testsrv.NewRedis(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		shared = append(shared, r)
	}
	var addrs []string
	for _, r := range shared {
		addrs = append(addrs, r.Addr)
	}
	os.Setenv("REDLOCK_ADDRS", strings.Join(addrs, ",")) // for the examples
	code := m.Run()
	for _, r := range shared {
		r.Stop()
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := testproxy.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// clients returns one fresh client per server, closed when the test ends.
func clients(t *testing.T, rs []*testsrv.Redis) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(rs))
	for i, r := range rs {
		cs[i] = client(t, r.Addr)
	}
	return cs
}

// client returns a client for addr that dials once per attempt: go-redis
// otherwise retries a refused dial 5 times, 100ms apart, so a killed node
// would cost every round the full node timeout.
func client(t *testing.T, addr string, opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{
		Addr:                  addr,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
	}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// testTimeout is the node timeout of most tests: generous (production would
// use tens of milliseconds), because the machine is small and shared with
// other test runs (load averages above 10 on 2 cores) and -race slows
// everything.
const testTimeout = 500 * time.Millisecond

func newLocker(t *testing.T, rs []*testsrv.Redis, opts ...redlock.Option) *redlock.Locker {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger())}, opts...)
	l, err := redlock.New(clients(t, rs), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// logBuffer is a logger whose output a test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// keysOn returns the lock keys matching pattern on every server that answers.
func keysOn(t *testing.T, rs []*testsrv.Redis, pattern string) map[string][]string {
	out := map[string][]string{}
	for _, r := range rs {
		c := redis.NewClient(r.Options())
		ks, err := c.Keys(context.Background(), pattern).Result()
		c.Close()
		if err == nil && len(ks) > 0 {
			out[r.Addr] = ks
		}
	}
	return out
}

// transient reports an error of nodes that were too slow to answer on this
// busy machine, which a test of something else may retry.
func transient(err error) bool {
	return errors.Is(err, dlock.ErrUnavailable)
}

func mustAcquire(t *testing.T, l dlock.Locker, key string, ttl time.Duration) *dlock.Lock {
	t.Helper()
	lock, err := l.TryAcquire(testCtx(t), key, ttl)
	for try := 0; try < 5 && transient(err); try++ {
		t.Logf("TryAcquire(%q), retrying: %v", key, err)
		lock, err = l.TryAcquire(testCtx(t), key, ttl)
	}
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	t.Cleanup(func() { lock.Release(context.Background()) })
	return lock
}
