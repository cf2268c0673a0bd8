package pgfence

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLQuerier is what SQL needs of a database/sql handle: a *sql.Tx (the
// usual case: the transaction that also writes), a *sql.DB or a *sql.Conn,
// and what sqlx, bun and GORM (its Statement.ConnPool) wrap them in.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL adapts a database/sql handle to Querier, so that the guards run on
// it: guard.Register(ctx, pgfence.SQL(tx), resource, fence, token). The
// guards' statements are PostgreSQL's, with $1 placeholders: use pgx's
// stdlib driver (what this package is tested with) or another PostgreSQL
// driver that takes them. The rules do not change with the handle:
// register in the transaction that reads and writes (a *sql.Tx), before
// the first read.
//
// The Querier it returns is for the guards' calls: its Exec reports a
// command tag that carries only the number of rows affected, and its
// QueryRow's Scan returns pgx.ErrNoRows (which matches sql.ErrNoRows) for
// no row. Errors keep the driver's types (with pgx's stdlib, a
// *pgconn.PgError).
func SQL(db SQLQuerier) Querier {
	return sqlQuerier{db}
}

type sqlQuerier struct{ db SQLQuerier }

func (q sqlQuerier) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	res, err := q.db.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.NewCommandTag("UPDATE " + strconv.FormatInt(n, 10)), nil
}

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return sqlRow{q.db.QueryRowContext(ctx, query, args...)}
}

type sqlRow struct{ row *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return pgx.ErrNoRows
	}
	return err
}
