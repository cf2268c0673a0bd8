package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redlock"
)

// redlockNodeTimeout bounds each request to one Redlock node: a tenth of the
// TTL, within [100ms, 1s]. The library's default (50ms) suits a warm pool; a
// CLI dials every node afresh on each invocation.
func redlockNodeTimeout(ttl time.Duration) time.Duration {
	if ttl == 0 {
		return time.Second
	}
	return min(max(ttl/10, 100*time.Millisecond), time.Second)
}

// openRedlock makes b, which holds several Redis clients, a Redlock backend.
func (a *app) openRedlock(b *backend, f *backendFlags) (*backend, error) {
	seen := map[string]int{}
	for i, n := range b.nodes {
		if j, ok := seen[n]; ok {
			b.close()
			return nil, usagef("Redis URLs #%d and #%d both point to %s: one server would vote twice in Redlock", j+1, i+1, n)
		}
		seen[n] = i
	}
	opts := []redlock.Option{redlock.WithLogger(a.logger()), redlock.WithObserver(a.observe), redlock.WithNodeTimeout(redlockNodeTimeout(f.ttl))}
	if f.holder {
		opts = append(opts, redlock.WithHolderInfo(f.name))
	}
	l, err := redlock.New(b.clients, opts...)
	if err != nil {
		b.close()
		return nil, err
	}
	// Close first: it lets releases still under way on the slower nodes
	// finish before the clients close.
	b.closers = append([]func(){func() { l.Close() }}, b.closers...)
	b.kind, b.locker, b.tokens = "redlock", l, l
	return b, nil
}

// openPostgres builds a PostgreSQL advisory-lock backend. It connects
// lazily, like the Redis ones. With holder, a held lock's session
// publishes the lock's name in its application_name, for inspect.
func (a *app) openPostgres(ctx context.Context, dsn string, f *backendFlags) (*backend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("PostgreSQL DSN: %v", err)
	}
	a.redact.add(cfg.ConnConfig.Password)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// Without one a dead host blocks until the kernel gives up.
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, usagef("PostgreSQL DSN: %v", err)
	}
	opts := []pglock.Option{pglock.WithLogger(a.logger()), pglock.WithObserver(a.observe)}
	if f.holder {
		opts = append(opts, pglock.WithHolderInfo(f.name))
	}
	l, err := pglock.New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	node := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	return &backend{
		kind:    "postgres",
		locker:  &fenceTable{Locker: l, pool: pool, create: f.createTable},
		nodes:   []string{node},
		closers: []func(){func() { l.Close() }, pool.Close},
	}, nil
}

// fenceTable handles pglock's fence sequence being missing: with
// --create-fence-table it creates the sequence (once, only when missing, so
// CREATE rights are needed only on a fresh database); without it dlock
// changes no schema and says how to proceed.
type fenceTable struct {
	*pglock.Locker
	pool   *pgxpool.Pool
	create bool
}

// errCreateFence marks an error of --create-fence-table's Migrate; the
// server's reason follows it.
var errCreateFence = errors.New("--create-fence-table could not create the " + pglock.FenceSequence + " sequence")

func (m *fenceTable) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	lock, err := m.Locker.TryAcquire(ctx, key, ttl)
	if errors.Is(err, pglock.ErrNotMigrated) {
		if !m.create {
			return nil, err // acquireError says how to proceed
		}
		if merr := pglock.Migrate(ctx, m.pool); merr != nil {
			// Not ErrNotMigrated: its advice, to pass the flag, is no help.
			return nil, fmt.Errorf("%w: %w", errCreateFence, merr)
		}
		lock, err = m.Locker.TryAcquire(ctx, key, ttl)
	}
	return lock, err
}
