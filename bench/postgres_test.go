package bench

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/internal/testsrv"
	"github.com/dlock-go/dlock/pglock"
)

var (
	pgOnce sync.Once
	pgDSN  string
	pgErr  error
	pgStop func()
)

// postgresDSN returns BENCH_POSTGRES or starts a throwaway cluster once.
func postgresDSN(tb testing.TB) string {
	pgOnce.Do(func() {
		if pgDSN = os.Getenv("BENCH_POSTGRES"); pgDSN != "" {
			return
		}
		dir, err := os.MkdirTemp("", "dlock-bench-pg")
		if err != nil {
			pgErr = err
			return
		}
		p, err := testsrv.NewPostgres(dir)
		if err != nil {
			os.RemoveAll(dir)
			pgErr = err
			return
		}
		pgDSN = p.DSN()
		pgStop = func() { p.Stop(); os.RemoveAll(dir) }
	})
	if pgErr != nil {
		tb.Fatal(pgErr)
	}
	return pgDSN
}

func newPool(tb testing.TB) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), postgresDSN(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// BenchmarkE: one goroutine takes and releases a session-level advisory
// lock on a pooled connection. raw: pg_try_advisory_lock then
// pg_advisory_unlock on a connection it takes from the pool and gives back;
// dlock also bumps the key's fence counter in the acquiring statement and
// (by default) sends a NOTIFY with the unlock.
func BenchmarkE(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		pool := newPool(b)
		const key = int64(0x5eed)
		measure(b, func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return errBusy
			}
			return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok)
		})
	})
	b.Run("raw-fenced", func(b *testing.B) {
		// The statement pglock sends (the lock and the fence counter's
		// upsert in one round trip), written by hand: the protocol's cost
		// without the library.
		pool := newPool(b)
		if err := pglock.Migrate(context.Background(), pool); err != nil {
			b.Fatal(err)
		}
		const key = int64(0x5eee)
		name := freshKey("E")
		sql := `WITH l AS (SELECT pg_try_advisory_lock($1) AS ok),
f AS (INSERT INTO ` + pglock.FenceTable + ` AS t (key, fence) SELECT $2::text, 1 FROM l WHERE l.ok
      ON CONFLICT (key) DO UPDATE SET fence = t.fence + 1 RETURNING t.fence)
SELECT l.ok, COALESCE((SELECT fence FROM f), 0) FROM l`
		measure(b, func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			var ok bool
			var fence int64
			if err := conn.QueryRow(ctx, sql, key, name).Scan(&ok, &fence); err != nil {
				return err
			}
			if !ok {
				return errBusy
			}
			return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok)
		})
	})
	for _, notify := range []bool{true, false} {
		name := "dlock"
		if !notify {
			name = "dlock-nonotify"
		}
		b.Run(name, func(b *testing.B) {
			pool := newPool(b)
			if err := pglock.Migrate(context.Background(), pool); err != nil {
				b.Fatal(err)
			}
			l, err := pglock.New(pool, pglock.WithReleaseNotify(notify))
			if err != nil {
				b.Fatal(err)
			}
			key := freshKey("E")
			measure(b, func(ctx context.Context) error {
				lock, err := l.TryAcquire(ctx, key, ttl)
				if err != nil {
					return err
				}
				return lock.Release(ctx)
			})
		})
	}
}
