package testsrv

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/internal/servers"
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
