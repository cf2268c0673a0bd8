package dlockotel_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// memLocker is a Locker over a map, as a single Redis server would be:
// for the span tests and the benchmarks, which are about the events, not
// the backend. Its events go to the observers it was made with; it names
// no backend.
type memLocker struct {
	*memServer
	events driver.Events
}

type memServer struct {
	mu    sync.Mutex
	keys  map[string]string // key -> token
	fence uint64
}

func newMem(observers ...func(context.Context, dlock.Event)) *memLocker {
	return &memLocker{memServer: &memServer{keys: map[string]string{}}, events: driver.NewEvents("", nil, observers...)}
}

// with returns a Locker on the same server whose events go to observers.
func (m *memLocker) with(observers ...func(context.Context, dlock.Event)) *memLocker {
	return &memLocker{memServer: m.memServer, events: driver.NewEvents("", nil, observers...)}
}

func (m *memLocker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	a := m.events.Attempt(ctx, key)
	return a.End(m.try(key, ttl))
}

func (m *memServer) try(key string, ttl time.Duration) (*dlock.Lock, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, held := m.keys[key]; held {
		return nil, fmt.Errorf("%w (held by another owner)", dlock.ErrNotAcquired)
	}
	start := time.Now()
	token := driver.NewToken()
	m.keys[key] = token
	m.fence++
	return driver.NewLock(key, token, m.fence, start.Add(ttl), &memGrant{m, key, token}), nil
}

// free deletes key behind its holder's back.
func (m *memServer) free(key string) {
	m.mu.Lock()
	delete(m.keys, key)
	m.mu.Unlock()
}

type memGrant struct {
	m          *memServer
	key, token string
}

func (g *memGrant) Extend(_ context.Context, ttl time.Duration) (time.Time, error) {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	start := time.Now()
	if g.m.keys[g.key] != g.token {
		return time.Time{}, fmt.Errorf("%w (gone)", dlock.ErrNotHeld)
	}
	return start.Add(ttl), nil
}

func (g *memGrant) Release(context.Context) error {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	if g.m.keys[g.key] != g.token {
		return fmt.Errorf("%w (gone)", dlock.ErrNotHeld)
	}
	delete(g.m.keys, g.key)
	return nil
}
