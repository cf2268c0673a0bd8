package pglock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/pgmigrate"
)

// FenceSequence is the sequence every acquisition draws its fence from, one
// for all keys. It is looked up through the session's search_path.
const FenceSequence = "dlock_fence"

// MigrateSQL creates the fence sequence and the table where semaphores
// record their limits (dlock_semaphore). Migrate runs it (and checks the
// sequence); run it yourself where schema changes go through a migration
// tool. CACHE 1 matters: with a per-session cache, sessions would hand out
// numbers from different ranges, and a later holder could get a smaller
// fence. A semaphore's row holds its limit (permits) and how many slots
// may be held (slots: above the limit while the holders of a shrunk
// semaphore finish). Run from several sessions at once it can fail with a
// unique violation (SQLSTATE 23505); Migrate serializes itself.
const MigrateSQL = `CREATE SEQUENCE IF NOT EXISTS ` + FenceSequence + `
	AS bigint INCREMENT BY 1 MINVALUE 1 NO MAXVALUE START WITH 1 CACHE 1 NO CYCLE;
CREATE TABLE IF NOT EXISTS dlock_semaphore (
	name bytea PRIMARY KEY,
	permits int NOT NULL,
	slots int NOT NULL
)`

// checkSequenceSQL reads the settings that fences depend on.
const checkSequenceSQL = `SELECT seqincrement, seqmin, seqcache, seqcycle
	FROM pg_sequence WHERE seqrelid = '` + FenceSequence + `'::regclass`

// Execer is what Migrate needs: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate runs MigrateSQL and checks that an existing sequence counts up
// by one, from at least 1, without a per-session cache and without
// wrapping around, as fences need; otherwise it returns an error matching
// dlock.ErrInvalid. A role without the right to create them gets
// dlock.ErrMisconfigured, an unreachable server dlock.ErrUnavailable.
// Migrate is idempotent, and safe to run from several processes at once
// (each holds a transaction-level advisory lock while it creates); lock
// traffic may run while it does.
func Migrate(ctx context.Context, db Execer) error {
	switch {
	case ctx == nil:
		return bridge.Invalidf("nil context")
	case nodeerr.IsNil(db):
		return bridge.Invalidf("nil database handle")
	}
	if _, err := db.Exec(ctx, pgmigrate.Serialized(MigrateSQL)); err != nil {
		return migrateErr(err)
	}
	return checkSequence(ctx, db)
}

// checkSequence verifies the fence sequence's settings, when db can also
// run a query (every pgx handle can).
func checkSequence(ctx context.Context, db Execer) error {
	qr, ok := db.(interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	})
	if !ok {
		return nil
	}
	var inc, minimum, cache int64
	var cycle bool
	err := qr.QueryRow(ctx, checkSequenceSQL).Scan(&inc, &minimum, &cache, &cycle)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pglock: migrate: %w: %s is not a sequence", dlock.ErrInvalid, FenceSequence)
	case err != nil:
		return migrateErr(err)
	case inc != 1 || minimum < 1 || cache != 1 || cycle:
		return fmt.Errorf("pglock: migrate: %w: sequence %s has INCREMENT %d, MINVALUE %d, CACHE %d, CYCLE %v; fences need INCREMENT 1, MINVALUE >= 1, CACHE 1 and NO CYCLE (ALTER SEQUENCE %s INCREMENT 1 CACHE 1 NO CYCLE)",
			dlock.ErrInvalid, FenceSequence, inc, minimum, cache, cycle, FenceSequence)
	}
	return nil
}
