package pgfence_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Replicas that start together all run Guard.Migrate on a fresh database:
// every one of them succeeds, whether it runs on a connection or inside a
// transaction, and the guard then works.
func TestMigrateConcurrently(t *testing.T) {
	const rounds, workers = 3, 8
	ctx := testCtx(t)
	for round := range rounds {
		schema := fmt.Sprintf("guard_migrate_race_%d", round)
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
		cfg := shared.PoolConfig(workers)
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Every worker has its connection before any starts, so that they
		// start together.
		conns := make([]*pgxpool.Conn, workers)
		for i := range conns {
			if conns[i], err = p.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		errs := make(chan error, workers)
		for i, c := range conns {
			go func() {
				<-start
				if i%2 == 0 {
					errs <- guard.Migrate(ctx, c.Conn())
					return
				}
				errs <- pgx.BeginFunc(ctx, c.Conn(), func(tx pgx.Tx) error { return guard.Migrate(ctx, tx) })
			}()
		}
		close(start)
		for range workers {
			if err := <-errs; err != nil {
				t.Errorf("round %d: concurrent Migrate: %v", round, err)
			}
		}
		for _, c := range conns {
			c.Release()
		}
		if err := guard.Register(ctx, p, "r", 1, "tok"); err != nil {
			t.Errorf("round %d: Register after Migrate: %v", round, err)
		}
		p.Close()
	}
}
