package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/redlock"
)

func TestConformance(t *testing.T) {
	raw := clients(t, shared)
	// The suite's 100 simultaneous contenders on fresh clients queue up for
	// seconds on this small machine under -race; the timeout shrinks to the
	// validity for the suite's short TTLs.
	// The clients' own socket timeouts must not undercut that node timeout.
	patient := func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	}
	locktest.Run(t, func(t *testing.T) dlock.Locker {
		cs := make([]redis.UniversalClient, len(shared))
		for i, r := range shared {
			cs[i] = client(t, r.Addr, patient)
		}
		l, err := redlock.New(cs, redlock.WithNodeTimeout(5*time.Second), redlock.WithLogger(quietLogger()))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return l
	},
		locktest.WithLapse(func(t *testing.T, key string) {
			for _, c := range raw {
				if err := c.Del(context.Background(), key).Err(); err != nil {
					t.Fatalf("DEL %s: %v", key, err)
				}
			}
		}))
}

// wrappedClient is a client type of a user's own, as an instrumented
// wrapper would be.
type wrappedClient struct{ *redis.Client }

func TestNewValidation(t *testing.T) {
	one := shared[0].Client(t)
	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		opts    []redlock.Option
		want    string
	}{
		{"no clients", nil, nil, "no redis clients"},
		{"nil interface", []redis.UniversalClient{one, nil, one}, nil, "#2 is nil"},
		{"nil pointer", []redis.UniversalClient{one, (*redis.Client)(nil)}, nil, "#2 is nil"},
		{"nil pointer of another type", []redis.UniversalClient{one, (*wrappedClient)(nil)}, nil, "#2 is nil"},
		{"cluster client", []redis.UniversalClient{redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}, nil, "Cluster client"},
		{"strict even", clients(t, shared[:4]), []redlock.Option{redlock.WithStrict(true)}, "4 nodes"},
		{"strict two", clients(t, shared[:2]), []redlock.Option{redlock.WithStrict(true)}, "2 nodes"},
		{"strict duplicate address", []redis.UniversalClient{shared[0].Client(t), shared[1].Client(t), shared[0].Client(t)},
			[]redlock.Option{redlock.WithStrict(true)}, "both point to " + shared[0].Addr},
		{"nil option", clients(t, shared), []redlock.Option{nil}, "nil option"},
		{"bad drift", clients(t, shared), []redlock.Option{redlock.WithDriftFactor(1)}, "drift factor 1"},
		{"negative drift", clients(t, shared), []redlock.Option{redlock.WithDriftFactor(-0.1)}, "drift factor -0.1"},
		{"zero node timeout", clients(t, shared), []redlock.Option{redlock.WithNodeTimeout(0)}, "node timeout 0s"},
		{"nil logger", clients(t, shared), []redlock.Option{redlock.WithLogger(nil)}, "nil logger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := redlock.New(tc.clients, tc.opts...)
			if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || l != nil {
				t.Fatalf("New: got (%v, %v), want nil and ErrInvalid naming %q", l, err, tc.want)
			}
		})
	}
}

func TestNewWarnings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []*testsrv.Redis
		want    string
	}{
		{"even", shared[:4], "4 nodes: an even number"},
		{"two", shared[:2], "2 nodes: Redlock tolerates no failed node"},
		{"one", shared[:1], "1 nodes"},
		{"duplicate address", []*testsrv.Redis{shared[0], shared[1], shared[0]}, "clients #1 and #3 both point to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			l, err := redlock.New(clients(t, tc.servers), redlock.WithLogger(logs.logger()))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Fatalf("log %q does not warn %q", logs.String(), tc.want)
			}
			// Still usable: the lock works on what there is.
			lock := mustAcquire(t, l, lockcheck.Key(t), time.Second)
			if err := lock.Release(testCtx(t)); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
	var logs logBuffer
	if _, err := redlock.New(clients(t, shared), redlock.WithLogger(logs.logger())); err != nil || logs.String() != "" {
		t.Fatalf("5 distinct nodes: New = %v, log %q; want no warning", err, logs.String())
	}
}

// Two clients for one server under different addresses (localhost vs
// 127.0.0.1) are found by run_id: the server must not vote twice.
func TestDuplicateServerByRunID(t *testing.T) {
	alias := func(r *testsrv.Redis) redis.UniversalClient {
		o := r.Options()
		o.Addr = strings.Replace(o.Addr, "127.0.0.1", "localhost", 1)
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return c
	}
	cs := []redis.UniversalClient{shared[0].Client(t), alias(shared[0]), shared[1].Client(t)}
	key := lockcheck.Key(t)

	strict, err := redlock.New(cs, redlock.WithStrict(true), redlock.WithNodeTimeout(testTimeout))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	_, err = strict.TryAcquire(testCtx(t), key, time.Second)
	if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "same server") {
		t.Fatalf("strict, same server twice: got %v, want ErrInvalid naming the duplicate", err)
	}
	if ks := keysOn(t, shared, key); len(ks) != 0 {
		t.Fatalf("a refused acquisition left keys: %v", ks)
	}

	var logs logBuffer
	lax, err := redlock.New(cs, redlock.WithLogger(logs.logger()), redlock.WithNodeTimeout(testTimeout))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Two real servers out of three clients: with server 1 stopped, only
	// server 0 answers — twice. That is one vote, not a majority.
	lock := mustAcquire(t, lax, key, time.Second)
	if !strings.Contains(logs.String(), "same server") {
		t.Fatalf("no warning about the duplicate: %q", logs.String())
	}
	lock.Release(testCtx(t))
	shared[1].Pause()
	defer shared[1].Resume()
	_, err = lax.TryAcquire(testCtx(t), key, time.Second)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Got != 1 || qe.Need != 2 {
		t.Fatalf("one server answering through two clients: got %v, want a QuorumError with 1 of 2 votes", err)
	}
}

func TestBadInput(t *testing.T) {
	l := newLocker(t, shared)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"ttl within drift", func() error { _, err := l.TryAcquire(ctx, "k", 2*time.Millisecond); return err }(), "drift margin 2.02ms"},
		{"multi no keys", func() error { _, err := l.Keys().TryAcquire(ctx, "none", time.Second); return err }(), "no keys"},
		{"multi empty key", func() error { _, err := l.Keys("a", "").TryAcquire(ctx, "a,", time.Second); return err }(), "empty lock key"},
		{"multi repeated key", func() error { _, err := l.Keys("a", "b", "a").TryAcquire(ctx, "a,b,a", time.Second); return err }(), `key "a" given twice`},
		{"multi empty name", func() error { _, err := l.Keys("a", "b").TryAcquire(ctx, "", time.Second); return err }(), "empty lock key"},
		{"release empty token", l.ReleaseToken(ctx, "k", ""), "empty token"},
		{"extend empty key", l.ExtendToken(ctx, "", "tok", time.Second), "empty lock key"},
		{"extend zero ttl", l.ExtendToken(ctx, "k", "tok", 0), "ttl 0s"},
		{"do nil fn", dlock.Do(ctx, l, "k", time.Second, nil), "nil function"},
		{"do multi nil fn", dlock.Do(ctx, l.Keys("k"), "k", time.Second, nil), "nil function"},
	} {
		if !errors.Is(tc.err, dlock.ErrInvalid) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrInvalid naming %q", tc.name, tc.err, tc.want)
		}
	}
}

// A waiting Acquire rides out a moment in which a majority of the nodes is
// down.
func TestConformanceOutage(t *testing.T) {
	rs := testsrv.StartRedisN(t, 3)
	locktest.RunOutage(t, func(t *testing.T) dlock.Locker { return newLocker(t, rs) },
		func(t *testing.T) func() {
			rs[0].Kill()
			rs[1].Kill()
			return func() {
				for _, r := range rs[:2] {
					if err := r.Restart(); err != nil {
						t.Error(err)
					}
				}
			}
		})
}
