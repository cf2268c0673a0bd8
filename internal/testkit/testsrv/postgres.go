package testsrv

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver for SQLDB

	"github.com/dlock-go/dlock/internal/testkit/servers"
)

// PostgresBinDir is where Debian's PostgreSQL 15 server binaries live. Other
// versions under /usr/lib/postgresql/*/bin are used when it is missing.
const PostgresBinDir = servers.PostgresBinDir

// Postgres is a throwaway PostgreSQL cluster (see servers.Postgres). Its
// methods are safe for concurrent use.
type Postgres struct{ *servers.Postgres }

// PostgresOption changes a server setting.
type PostgresOption = servers.PostgresOption

// AdvisoryLock is one row of pg_locks with locktype 'advisory'.
type AdvisoryLock = servers.AdvisoryLock

// PostgresSetting passes -c name=value to the postmaster, e.g.
// PostgresSetting("max_locks_per_transaction", "10"); it overrides the
// defaults.
func PostgresSetting(name, value string) PostgresOption {
	return servers.PostgresSetting(name, value)
}

// PostgresBin returns the directory holding initdb and postgres, or an error
// saying how to install them.
func PostgresBin() (string, error) { return servers.PostgresBin() }

// StartPostgres starts a fresh cluster for one test and stops it when the
// test ends. It takes a second or two; packages with many tests share one
// cluster from TestMain with NewPostgres instead.
func StartPostgres(tb testing.TB, opts ...PostgresOption) *Postgres {
	tb.Helper()
	dir, err := os.MkdirTemp("", "testsrv-pg")
	if err != nil {
		tb.Fatal(err)
	}
	p, err := NewPostgres(dir, opts...)
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Stop()
		os.RemoveAll(dir)
	})
	return p
}

// NewPostgres creates a cluster in dir (which must exist and be empty or
// new) and starts it on a free loopback port. The caller must call Stop.
func NewPostgres(dir string, opts ...PostgresOption) (*Postgres, error) {
	p, err := servers.NewPostgres(dir, opts...)
	if err != nil {
		return nil, err
	}
	return &Postgres{p}, nil
}

// StartStandby starts a hot standby of p for one test and stops it when the
// test ends.
func (p *Postgres) StartStandby(tb testing.TB) *Postgres {
	tb.Helper()
	dir, err := os.MkdirTemp("", "testsrv-pg-standby")
	if err != nil {
		tb.Fatal(err)
	}
	s, err := p.NewStandby(dir)
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	return &Postgres{s}
}

// Pool returns a connection pool of at most maxConns connections (0:
// pgxpool's default), closed when the test ends.
func (p *Postgres) Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), p.PoolConfig(maxConns))
	if err != nil {
		tb.Fatalf("pgxpool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// SQLDB returns a database/sql handle on this server, opened through pgx's
// driver registration ("pgx", from package stdlib) as sqlx, GORM, ent and
// bun users open theirs; it is closed when the test ends.
func (p *Postgres) SQLDB(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("pgx", p.DSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// SchemaPool creates schema, an empty namespace (a fresh database for what
// is found through the search_path), and returns a pool of at most
// maxConns connections whose search_path is that schema. Both go when the
// test ends.
func (p *Postgres) SchemaPool(tb testing.TB, schema string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	ctx := context.Background()
	if err := p.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	cfg := p.PoolConfig(maxConns)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// DB is what a *pgx.Conn and a pgx.Tx both offer.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Together runs fn on n connections of pool at once, as replicas that
// start together do: every connection is open before any fn starts, and
// every other fn runs inside a transaction (committed when fn returns
// nil). It returns the errors of the calls that failed.
func Together(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, n int, fn func(db DB) error) []error {
	tb.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		var err error
		if conns[i], err = pool.Acquire(ctx); err != nil {
			tb.Fatal(err)
		}
		defer conns[i].Release()
	}
	start := make(chan struct{})
	errs := make(chan error, n)
	for i, c := range conns {
		go func() {
			<-start
			if i%2 == 0 {
				errs <- fn(c.Conn())
				return
			}
			errs <- pgx.BeginFunc(ctx, c.Conn(), func(tx pgx.Tx) error { return fn(tx) })
		}()
	}
	close(start)
	var failed []error
	for range n {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}
