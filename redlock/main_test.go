package redlock_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// shared are five redis-servers for the tests that do not kill nodes.
var shared []*testsrv.Redis

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
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
	code := m.Run()
	for _, r := range shared {
		r.Stop()
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
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
		cs[i] = r.Client(t)
	}
	return cs
}

// testTimeout is the node timeout of most tests: generous, because the
// machine is small and shared and the tests run with -race.
const testTimeout = 150 * time.Millisecond

func newLocker(t *testing.T, rs []*testsrv.Redis, opts ...redlock.Option) *redlock.Locker {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(testTimeout), redlock.WithLogger(quietLogger())}, opts...)
	l, err := redlock.New(clients(t, rs), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

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

func mustAcquire(t *testing.T, l dlock.Locker, key string, ttl time.Duration) *dlock.Lock {
	t.Helper()
	lock, err := l.TryAcquire(testCtx(t), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	t.Cleanup(func() { lock.Release(context.Background()) })
	return lock
}
