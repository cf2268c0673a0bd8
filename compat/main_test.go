package compat_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redlock"
)

// shared are five redis-servers.
var shared []*testsrv.Redis

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	redis.SetLogger(quietRedisLogger{})
	dir, err := os.MkdirTemp("", "compat-test")
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

// client returns a client for addr that dials once per attempt.
func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// newLocker returns a redlock Locker over rs, with a node timeout generous
// for a small, shared machine.
func newLocker(t *testing.T, rs []*testsrv.Redis, opts ...redlock.Option) *redlock.Locker {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond), redlock.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	l, err := redlock.New(clients(t, rs), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

// transient reports an error of nodes that were too slow to answer on this
// busy machine, which a test of something else may retry.
func transient(err error) bool {
	return errors.Is(err, dlock.ErrUnavailable)
}
