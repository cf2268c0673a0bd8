package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/pgqueue"
)

// Fences come from one sequence: every grant of a key gets a larger fence
// than the grants before it, whichever Locker (pool, session) it went
// through, and whatever keys were locked in between.
func TestFencesIncreaseAcrossSessions(t *testing.T) {
	lockers := []*pglock.Locker{newLocker(t, 2), newLocker(t, 2), newLocker(t, 2)}
	key, other := uniqueKey(t), uniqueKey(t)
	var last uint64
	for i := range 12 {
		l := lockers[i%len(lockers)]
		if i%3 == 0 {
			lockcheck.MustAcquire(t, lockers[(i+1)%len(lockers)], other, time.Second).Release(testCtx(t))
		}
		lock, err := l.TryAcquire(testCtx(t), key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if lock.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, lock.Fence(), last)
		}
		last = lock.Fence()
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// Migrate refuses a fence sequence whose settings would break fences: a
// per-session cache (two sessions handing out numbers from different
// ranges), and a relation of that name that is not a sequence.
func TestMigrateChecksSequence(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct{ name, create string }{
		{"cache", "CREATE SEQUENCE %s.dlock_fence CACHE 20"},
		{"cycle", "CREATE SEQUENCE %s.dlock_fence MAXVALUE 100 CYCLE"},
		{"table", "CREATE TABLE %s.dlock_fence (n int)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := "migrate_" + tc.name
			if err := shared.Exec(ctx, "CREATE SCHEMA "+schema+"; "+fmt.Sprintf(tc.create, schema)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { shared.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
			cfg := shared.PoolConfig(1)
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			err = pglock.Migrate(ctx, pool)
			wantIs(t, err, dlock.ErrInvalid)
			t.Log(err)
		})
	}
	// The shared database's sequence, made by MigrateSQL, passes.
	if err := pglock.Migrate(ctx, shared.Pool(t, 1)); err != nil {
		t.Fatalf("Migrate on a migrated database: %v", err)
	}
}

// A fence survives a crash of the server. The sequence writes WAL once per
// 32 values, so a fence drawn without WAL of its own is durable only when
// the record written for an earlier value is: here that record belongs to a
// transaction still open at the crash. The session lock's commit must flush
// it (pglock makes it take an xid), or after the restart the sequence starts
// over below the fence already handed out.
func TestFenceSurvivesCrash(t *testing.T) {
	// fsync=off still writes the WAL to the kernel at a flush, which is
	// enough to survive a server crash; synchronous_commit=on makes commits
	// flush.
	pg := testsrv.StartPostgres(t, testsrv.PostgresSetting("synchronous_commit", "on"))
	ctx := testCtx(t)
	if err := pg.Exec(ctx, pglock.MigrateSQL); err != nil {
		t.Fatal(err)
	}

	// A transaction draws the sequence's first value: that call writes the
	// WAL record covering the next 32, and the transaction stays open.
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var first int64
	if err := tx.QueryRow(ctx, "SELECT nextval('dlock_fence')").Scan(&first); err != nil {
		t.Fatal(err)
	}
	var unflushed bool
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() > pg_current_wal_flush_lsn()").Scan(&unflushed); err != nil {
		t.Fatal(err)
	}
	if !unflushed {
		t.Log("the WAL was flushed before the lock was taken (background writer); the test proves less this time")
	}

	l, err := pglock.New(pg.Pool(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lock, err := l.TryAcquire(ctx, "crash", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if lock.Fence() <= uint64(first) {
		t.Fatalf("fence %d not above the transaction's %d", lock.Fence(), first)
	}

	if err := pg.Restart(); err != nil { // immediate shutdown: a crash
		t.Fatal(err)
	}
	err = lock.Release(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Release after the crash: %v", err)
	}
	l2, err := pglock.New(pg.Pool(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	again, err := l2.TryAcquire(ctx, "crash", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(context.Background())
	if again.Fence() <= lock.Fence() {
		t.Fatalf("after a crash the fence went back: %d, was %d before", again.Fence(), lock.Fence())
	}
}

// Migrate (and Queue.Migrate) is safe to run from several processes at
// once, as cron jobs on several machines do on their first night: on a
// fresh schema every one of them succeeds (none trips over the others'
// CREATE), whether it runs on a connection or inside a transaction, and
// then locks.
func TestMigrateConcurrently(t *testing.T) {
	const rounds, workers = 5, 8
	ctx := testCtx(t)
	queue, err := pgqueue.NewQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		pool := shared.SchemaPool(t, fmt.Sprintf("migrate_race_%d", round), workers)
		migrate := func(db testsrv.DB) error {
			if err := pglock.Migrate(ctx, db); err != nil {
				return err
			}
			return queue.Migrate(ctx, db)
		}
		for _, err := range testsrv.Together(ctx, t, pool, workers, migrate) {
			t.Errorf("round %d: concurrent Migrate: %v", round, err)
		}
		l, err := pglock.New(pool)
		if err != nil {
			t.Fatal(err)
		}
		lock := lockcheck.MustAcquire(t, l, uniqueKey(t), time.Second)
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
}
