package pgfence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/internal/fencetest"
	"github.com/dlock-go/dlock/fence/pgfence"
)

// inSQLTx runs fn in a database/sql transaction that commits when fn
// returns nil.
func inSQLTx(t *testing.T, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(testCtx(t), nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// sqlTableValue and sqlGuardValue adapt the guards, used through
// database/sql, to the shared contract: single writes on the *sql.DB,
// reads and guarded writes in a *sql.Tx.
type sqlTableValue struct {
	t  *testing.T
	db *sql.DB
	id int64
}

func (v *sqlTableValue) Register(f uint64, tok string) error {
	return values.Register(testCtx(v.t), pgfence.SQL(v.db), v.id, f, tok)
}

func (v *sqlTableValue) Read(f uint64, tok string) (string, error) {
	var s sql.NullString
	err := inSQLTx(v.t, v.db, func(tx *sql.Tx) error {
		if err := values.Register(testCtx(v.t), pgfence.SQL(tx), v.id, f, tok); err != nil {
			return asOp("read", err)
		}
		return tx.QueryRowContext(testCtx(v.t), "SELECT value FROM fenced_values WHERE id = $1", v.id).Scan(&s)
	})
	return s.String, err
}

func (v *sqlTableValue) Write(f uint64, tok, value string) error {
	return values.Update(testCtx(v.t), pgfence.SQL(v.db), v.id, f, tok, map[string]any{"value": value})
}

func (v *sqlTableValue) Peek() (string, uint64) { return peek(v.t, v.id) }

type sqlGuardValue struct {
	t  *testing.T
	db *sql.DB
	id int64
}

func (v *sqlGuardValue) resource() string { return fmt.Sprintf("sql-value-%d", v.id) }

func (v *sqlGuardValue) Register(f uint64, tok string) error {
	return guard.Register(testCtx(v.t), pgfence.SQL(v.db), v.resource(), f, tok)
}

func (v *sqlGuardValue) Read(f uint64, tok string) (string, error) {
	var s sql.NullString
	err := inSQLTx(v.t, v.db, func(tx *sql.Tx) error {
		if err := guard.Register(testCtx(v.t), pgfence.SQL(tx), v.resource(), f, tok); err != nil {
			return asOp("read", err)
		}
		return tx.QueryRowContext(testCtx(v.t), "SELECT value FROM fenced_values WHERE id = $1", v.id).Scan(&s)
	})
	return s.String, err
}

func (v *sqlGuardValue) Write(f uint64, tok, value string) error {
	return inSQLTx(v.t, v.db, func(tx *sql.Tx) error {
		if err := guard.Register(testCtx(v.t), pgfence.SQL(tx), v.resource(), f, tok); err != nil {
			return asOp("write", err)
		}
		_, err := tx.ExecContext(testCtx(v.t), "UPDATE fenced_values SET value = $2 WHERE id = $1", v.id, value)
		return err
	})
}

func (v *sqlGuardValue) Peek() (string, uint64) {
	s, _ := peek(v.t, v.id)
	h, err := guard.Highest(testCtx(v.t), pgfence.SQL(v.db), v.resource())
	if err != nil {
		v.t.Fatalf("Highest: %v", err)
	}
	return s, h
}

// The guards keep the whole contract through database/sql (pgx's stdlib
// driver): a *sql.DB for single statements, a *sql.Tx for
// register-then-read and register-then-write.
func TestContractDatabaseSQL(t *testing.T) {
	db := shared.SQLDB(t)
	t.Run("Table", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fencetest.Guard { return &sqlTableValue{t: t, db: db, id: newRow(t)} })
	})
	t.Run("Guard", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fencetest.Guard { return &sqlGuardValue{t: t, db: db, id: newRow(t)} })
	})
}

// Through database/sql, a missing row is ErrNoRow, a row refused is a
// StaleError with the highest fence, a database error is unavailable,
// Migrate works, and a nil handle is refused before anything is sent.
func TestDatabaseSQLErrors(t *testing.T) {
	ctx := testCtx(t)
	db := shared.SQLDB(t)
	err := values.Update(ctx, pgfence.SQL(db), int64(-1), 1, "tok", map[string]any{"value": "x"})
	if !errors.Is(err, pgfence.ErrNoRow) || errors.Is(err, fence.ErrStale) {
		t.Errorf("missing row: %v, want ErrNoRow", err)
	}
	id := newRow(t)
	if err := values.Update(ctx, pgfence.SQL(db), id, 5, "A", nil); err != nil {
		t.Fatal(err)
	}
	var se *fence.StaleError
	if err := values.Update(ctx, pgfence.SQL(db), id, 4, "B", nil); !errors.As(err, &se) || se.Highest != 5 {
		t.Errorf("stale write: %v, want a StaleError below 5", err)
	}
	if err := values.Update(ctx, pgfence.SQL(db), id, 6, "B", map[string]any{"no_such_column": 1}); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("unknown column: %v", err)
	}
	if err := guard.Migrate(ctx, pgfence.SQL(db)); err != nil {
		t.Errorf("Migrate: %v", err)
	}
	var nilDB *sql.DB
	var nilTx *sql.Tx
	for _, q := range []pgfence.Querier{pgfence.SQL(nil), pgfence.SQL(nilDB), pgfence.SQL(nilTx)} {
		if err := guard.Register(ctx, q, "r", 1, "tok"); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("nil handle: %v", err)
		}
	}
	// pgx handles fence the same rows beside it.
	if err := values.Update(ctx, pool, id, 6, "C", map[string]any{"value": "pgx"}); err != nil {
		t.Fatal(err)
	}
	if v, f := peek(t, id); v != "pgx" || f != 6 {
		t.Errorf("row after the pgx write: %q, %d", v, f)
	}
}
