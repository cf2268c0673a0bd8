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
// dlock also draws a fence (nextval) in the acquiring statement and, with
// notifications on (the default), checks for waiters in the unlocking one
// (nobody waits here, so no NOTIFY goes out).
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
		// The lock and the fence in one round trip, written by hand: the
		// protocol's cost without the library (and without its checks).
		pool := newPool(b)
		if err := pglock.Migrate(context.Background(), pool); err != nil {
			b.Fatal(err)
		}
		const key = int64(0x5eee)
		sql := `SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('` + pglock.FenceSequence + `') END`
		measure(b, func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			var fence *int64
			if err := conn.QueryRow(ctx, sql, key).Scan(&fence); err != nil {
				return err
			}
			if fence == nil {
				return errBusy
			}
			var ok bool
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
