package compat_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/redislock"
)

// miniredis implements DELEX IFEQ (Redis 8.4) but not SET IFEQ, so it is
// where redislock's native release runs; extension falls back to the
// script. It is an in-process imitation of Redis, named as such;
// everything else runs against real redis-server 7.
func TestConformanceMiniredisNativeRelease(t *testing.T) {
	m := miniredis.RunT(t)
	defer realTime(m)()
	var sent commands
	locktest.Run(t, func(t *testing.T) dlock.Locker { return newRedislock(t, miniClient(t, m, &sent)) },
		locktest.WithLapse(func(t *testing.T, key string) { m.Del(key) }))
	if !sent.saw("delex") {
		t.Fatal("no DELEX was sent: the native release did not run")
	}
}

// The native release wakes a waiter through the wake script pipelined
// with DELEX, also after the script cache was flushed (NOSCRIPT).
func TestWakeOnReleaseNative(t *testing.T) {
	m := miniredis.RunT(t)
	var sent commands
	holder, waiter := newRedislock(t, miniClient(t, m, &sent)), newRedislock(t, miniClient(t, m, &sent))
	key := lockcheck.Key(t)
	for round := range 2 {
		if round == 1 {
			miniClient(t, m, nil).ScriptFlush(testCtx(t))
		}
		lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
		got := make(chan error, 1)
		go func() {
			l, err := dlock.Acquire(ctx, waiter, key, 10*time.Second, dlock.WithRetryDelay(5*time.Second), dlock.WithRetryJitter(0))
			if err == nil {
				err = l.Release(context.Background())
			}
			got <- err
		}()
		// The waiter queues in its first attempt; give it that round trip.
		lockcheck.Eventually(t, 5*time.Second, func() error {
			if n, _ := m.ZMembers(keys.Queue(key)); len(n) == 0 {
				return errors.New("the waiter is not queued yet")
			}
			return nil
		})
		start := time.Now()
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		cancel()
		if d := time.Since(start); d > time.Second {
			t.Fatalf("round %d: native hand-off took %v with a 5s poll interval", round, d)
		}
	}
	if !sent.saw("delex") {
		t.Fatal("no DELEX was sent: the native release did not run")
	}
	holder.Close()
	waiter.Close()
}

func newRedislock(t *testing.T, c redis.UniversalClient) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// miniClient returns a client of m that records the commands it sends in
// sent (if not nil).
func miniClient(t *testing.T, m *miniredis.Miniredis, sent *commands) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	if sent != nil {
		c.AddHook(sent)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// commands is a go-redis hook that records the names of the commands sent.
type commands struct {
	mu    sync.Mutex
	names map[string]bool
}

func (c *commands) record(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = map[string]bool{}
	}
	for _, cmd := range cmds {
		c.names[strings.ToLower(cmd.Name())] = true
	}
}

func (c *commands) saw(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name]
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.record(cmd)
		return next(ctx, cmd)
	}
}

func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.record(cmds...)
		return next(ctx, cmds)
	}
}

// realTime makes miniredis expire keys in real time (it only moves TTLs when
// told to).
func realTime(m *miniredis.Miniredis) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		last := time.Now()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); <-finished }
}
