package bench

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
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
	for _, impl := range pgImpls {
		b.Run(impl.name, func(b *testing.B) { measure(b, impl.setup(b, newPool(b))) })
	}
}

// pgImpls are the PostgreSQL lock cycles of BenchmarkE, the baseline first.
var pgImpls = []struct {
	name  string
	setup func(tb testing.TB, pool *pgxpool.Pool) cycleFunc
}{
	{"raw", func(tb testing.TB, pool *pgxpool.Pool) cycleFunc {
		const key = int64(0x5eed)
		return func(ctx context.Context) error {
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
		}
	}},
	{"raw-fenced", func(tb testing.TB, pool *pgxpool.Pool) cycleFunc {
		// The lock and the fence in one round trip, written by hand: the
		// protocol's cost without the library (and without its checks).
		if err := pglock.Migrate(context.Background(), pool); err != nil {
			tb.Fatal(err)
		}
		const key = int64(0x5eee)
		sql := `SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('` + pglock.FenceSequence + `') END`
		return func(ctx context.Context) error {
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
		}
	}},
	{"dlock", func(tb testing.TB, pool *pgxpool.Pool) cycleFunc { return pglockCycle(tb, pool, true) }},
	{"dlock-nonotify", func(tb testing.TB, pool *pgxpool.Pool) cycleFunc { return pglockCycle(tb, pool, false) }},
}

func pglockCycle(tb testing.TB, pool *pgxpool.Pool, notify bool) cycleFunc {
	if err := pglock.Migrate(context.Background(), pool); err != nil {
		tb.Fatal(err)
	}
	l, err := pglock.New(pool, pglock.WithReleaseNotify(notify))
	if err != nil {
		tb.Fatal(err)
	}
	return tryCycle(l, freshKey("E"))
}
