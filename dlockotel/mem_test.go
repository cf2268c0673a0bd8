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
// the backend.
type memLocker struct {
	mu    sync.Mutex
	keys  map[string]string // key -> token
	fence uint64
}

func newMem() *memLocker { return &memLocker{keys: map[string]string{}} }

func (m *memLocker) TryAcquire(_ context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
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
func (m *memLocker) free(key string) {
	m.mu.Lock()
	delete(m.keys, key)
	m.mu.Unlock()
}

type memGrant struct {
	m          *memLocker
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
