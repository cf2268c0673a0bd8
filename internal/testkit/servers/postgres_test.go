package servers

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startPostgres(t *testing.T, opts ...PostgresOption) *Postgres {
	t.Helper()
	dir, err := os.MkdirTemp("", "servers-pg")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPostgres(dir, opts...)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		os.RemoveAll(dir)
	})
	return p
}

func newPool(t *testing.T, p *Postgres, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), p.PoolConfig(maxConns))
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// One cluster, every helper: a pool works, a session lock shows up in
// pg_locks, Terminate ends the session and frees its lock, Restart brings the
// server back on its port, and Stop leaves no process behind.
func TestPostgres(t *testing.T) {
	start := time.Now()
	pg := startPostgres(t)
	t.Logf("initdb + start took %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pool := newPool(t, pg, 2)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer conn.Release()
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(42)) l").Scan(&pid); err != nil {
		t.Fatalf("lock: %v", err)
	}
	locks, err := pg.AdvisoryLocks(ctx)
	if err != nil {
		t.Fatalf("AdvisoryLocks: %v", err)
	}
	if len(locks) != 1 || locks[0].Int64() != 42 || locks[0].PID != uint32(pid) || !locks[0].Granted || locks[0].ObjSubID != 1 {
		t.Fatalf("pg_locks: %+v, want one granted lock on 42 by pid %d", locks, pid)
	}

	if err := pg.Terminate(ctx, uint32(pid)); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if left, err := pg.WaitNoAdvisoryLocks(ctx); err != nil {
		t.Fatalf("lock still there after Terminate: %+v (%v)", left, err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a terminated session still answers")
	}
	if err := pg.Terminate(ctx, uint32(pid)); err == nil {
		t.Fatal("Terminate of a gone backend reported success")
	}

	if err := pg.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := pg.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after Restart: %v", err)
	}

	pg.Stop()
	pg.Stop() // twice is fine
	pg.mu.Lock()
	proc := pg.cmd.Process
	pg.mu.Unlock()
	if err := syscall.Kill(proc.Pid, 0); err == nil {
		t.Fatalf("postmaster %d still running after Stop", proc.Pid)
	}
}

func TestPostgresSetting(t *testing.T) {
	pg := startPostgres(t, PostgresSetting("max_locks_per_transaction", "17"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var v string
	if err := newPool(t, pg, 1).QueryRow(ctx, "SHOW max_locks_per_transaction").Scan(&v); err != nil || v != "17" {
		t.Fatalf("max_locks_per_transaction = %q (%v), want 17", v, err)
	}
}

func TestPostgresStandby(t *testing.T) {
	pg := startPostgres(t)
	dir, err := os.MkdirTemp("", "servers-pg-standby")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	standby, err := pg.NewStandby(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recovering bool
	if err := newPool(t, standby, 1).QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil || !recovering {
		t.Fatalf("standby pg_is_in_recovery() = %v, %v; want true", recovering, err)
	}
	if err := standby.Exec(ctx, "CREATE TABLE t (x int)"); err == nil {
		t.Fatal("the standby accepted a write")
	}
}

// TestPostgresNoTemplate: with PostgresNoTemplate the cluster is made by
// initdb and nothing is left in the temporary directory once it is gone;
// without it a template cluster stays there for the next start.
func TestPostgresNoTemplate(t *testing.T) {
	for _, noTemplate := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "cluster")
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		var opts []PostgresOption
		if noTemplate {
			opts = append(opts, PostgresNoTemplate())
		}
		p, err := NewPostgres(dir, opts...)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Exec(context.Background(), "SELECT 1")
		p.Stop()
		os.RemoveAll(dir)
		if err != nil {
			t.Fatal(err)
		}
		left, _ := os.ReadDir(tmp)
		if noTemplate != (len(left) == 0) {
			t.Errorf("PostgresNoTemplate %v: left %d entries in TMPDIR (%v)", noTemplate, len(left), left)
		}
	}
}
