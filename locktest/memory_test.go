package locktest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The suite proves a backend written outside the backends' packages, with
// only the public driver and locktest packages: here a lock server in
// memory, shared by the Lockers as a Redis server would be.
func TestConformanceOfAnOutsideBackend(t *testing.T) {
	srv := &memServer{keys: map[string]memKey{}}
	locktest.Run(t, func(t *testing.T) dlock.Locker { return &memLocker{srv} },
		locktest.WithLapse(func(t *testing.T, key string) { srv.del(key) }),
		locktest.WithOutage(func(t *testing.T) (end func()) {
			srv.setDown(true)
			return func() { srv.setDown(false) }
		}))
}

// memServer keeps each key's token and expiry, and a fence counter.
type memServer struct {
	mu    sync.Mutex
	keys  map[string]memKey
	fence uint64
	down  bool
}

type memKey struct {
	token   string
	expires time.Time
}

func (s *memServer) del(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

func (s *memServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// call runs f on the server, or fails as an unreachable server does.
func (s *memServer) call(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return &dlock.NodeError{Node: "memory", Err: fmt.Errorf("%w: connection refused", dlock.ErrUnavailable)}
	}
	return f()
}

type memLocker struct{ srv *memServer }

func (l *memLocker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if ctx == nil {
		return nil, driver.Invalidf("nil context")
	}
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := driver.CheckTTL(ttl); err != nil {
		return nil, err
	}
	token := driver.NewToken()
	start := time.Now()
	var fence uint64
	err := l.srv.call(ctx, func() error {
		if k, ok := l.srv.keys[key]; ok && k.expires.After(time.Now()) {
			return fmt.Errorf("dlock: acquire %q: %w (held by another owner)", key, dlock.ErrNotAcquired)
		}
		l.srv.keys[key] = memKey{token: token, expires: time.Now().Add(ttl)}
		l.srv.fence++
		fence = l.srv.fence
		return nil
	})
	if err != nil {
		return nil, err
	}
	until := driver.ValidUntil(start, ttl, driver.DefaultDriftFactor)
	return driver.NewLock(key, token, fence, until, &memGrant{l.srv, key, token}), nil
}

type memGrant struct {
	srv        *memServer
	key, token string
}

// holds reports whether the server still has the grant's token; it is
// called with the server's lock held.
func (g *memGrant) holds() bool {
	k, ok := g.srv.keys[g.key]
	return ok && k.token == g.token && k.expires.After(time.Now())
}

func (g *memGrant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	err := g.srv.call(ctx, func() error {
		if !g.holds() {
			return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
		}
		g.srv.keys[g.key] = memKey{token: g.token, expires: time.Now().Add(ttl)}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return driver.ValidUntil(start, ttl, driver.DefaultDriftFactor), nil
}

func (g *memGrant) Release(ctx context.Context) error {
	return g.srv.call(ctx, func() error {
		if !g.holds() {
			return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
		}
		delete(g.srv.keys, g.key)
		return nil
	})
}
