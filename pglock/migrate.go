package pglock

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"
)

// FenceTable is the table that holds one fence counter per lock key. It is
// looked up through the session's search_path.
const FenceTable = "dlock_fences"

// MigrateSQL creates the fence table. Migrate runs it; run it yourself where
// schema changes go through a migration tool.
const MigrateSQL = `CREATE TABLE IF NOT EXISTS ` + FenceTable + ` (
	key   text PRIMARY KEY,
	fence bigint NOT NULL CHECK (fence > 0)
)`

// Execer is what Migrate needs: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the fence table if it does not exist (MigrateSQL). pglock
// never creates it on its own: a Locker whose database lacks it fails with
// ErrNotMigrated. Migrate is idempotent; lock traffic may run while it does.
func Migrate(ctx context.Context, db Execer) error {
	if ctx == nil {
		return dlock.Invalidf("nil context")
	}
	if isNil(db) {
		return dlock.Invalidf("nil database handle")
	}
	if _, err := db.Exec(ctx, MigrateSQL); err != nil {
		return fmt.Errorf("pglock: migrate: %w: %w", dlock.ErrUnavailable, err)
	}
	return nil
}

// isNil reports whether v is nil or a typed nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return r.IsNil()
	}
	return false
}
