package pglock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// rowExec runs the acquiring and releasing statements, the hot path of an
// uncontended lock: one statement each. Through pgx.Conn.QueryRow, pgx maps
// every argument and column through its type map on every call; here the
// statements' few types (bigint and int4 keys, text; bigint, int4, bool and
// text columns) are encoded and decoded by hand in the binary format, on a
// statement prepared once per connection (its saving: bench/RESULTS.md).
// The server sees the same statements and the same values either way.
//
// The direct path is taken only when the pool's connections use pgx's
// default query mode (QueryExecModeCacheStatement: prepared statements)
// and no tracer, and only for a statement whose prepared description has
// exactly the expected parameter and column types. Otherwise, and for a
// pool configured differently, the statement goes through QueryRow, so a
// pool set up for a proxy that cannot take prepared statements, or traced
// queries, work as before.
type rowExec struct {
	direct bool
}

func newRowExec(cfg *pgx.ConnConfig) rowExec {
	return rowExec{direct: cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && cfg.Tracer == nil}
}

// rowBufs are one statement's encoded arguments, kept in the grant so that
// encoding them allocates nothing.
type rowBufs struct {
	params [5][]byte
	ints   [16]byte
}

// queryRow runs sql on conn with args (int64, int32 or string values, or
// pointers to the integers) and reads its one row into dest (*pgtype.Int8,
// *int32, *bool or *string), as conn.QueryRow(ctx, sql, args...).Scan(dest...)
// would.
func (x rowExec) queryRow(ctx context.Context, conn *pgx.Conn, sql string, b *rowBufs, args, dest []any) error {
	if !x.direct {
		return conn.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	sd, err := conn.Prepare(ctx, sql, sql) // once per connection; then a map lookup
	if err != nil {
		return err
	}
	params, ok := b.encode(sd.ParamOIDs, args)
	if !ok || !columnsFit(sd.Fields, dest) {
		return conn.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	rr := conn.PgConn().ExecStatement(ctx, sd, params, binaryFormat, binaryFormat)
	rows := 0
	var derr error
	for rr.NextRow() {
		if rows == 0 {
			derr = decodeRow(rr.Values(), dest)
		}
		rows++
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	switch {
	case derr != nil:
		return derr
	case rows == 0:
		return pgx.ErrNoRows
	case rows > 1:
		return errTooManyRows
	}
	return nil
}

var (
	binaryFormat   = []int16{1} // one code: every parameter and column binary
	errTooManyRows = errors.New("pglock: statement returned more than one row")
)

// encode writes args in the binary format of the statement's parameter
// types; ok is false when an argument does not match its type.
func (b *rowBufs) encode(oids []uint32, args []any) (params [][]byte, ok bool) {
	if len(oids) != len(args) || len(args) > len(b.params) {
		return nil, false
	}
	ints := b.ints[:0]
	for i, a := range args {
		var v []byte
		switch oids[i] {
		case pgtype.Int8OID:
			n, isInt := a.(*int64)
			if !isInt {
				return nil, false
			}
			ints = binary.BigEndian.AppendUint64(ints, uint64(*n))
			v = ints[len(ints)-8:]
		case pgtype.Int4OID:
			n, isInt := a.(*int32)
			if !isInt {
				return nil, false
			}
			ints = binary.BigEndian.AppendUint32(ints, uint32(*n))
			v = ints[len(ints)-4:]
		case pgtype.TextOID:
			s, isString := a.(string)
			if !isString {
				return nil, false
			}
			v = []byte(s)
		default:
			return nil, false
		}
		b.params[i] = v
	}
	return b.params[:len(args)], true
}

// columnsFit reports whether the statement's columns have the types
// decodeRow reads into dest.
func columnsFit(fields []pgconn.FieldDescription, dest []any) bool {
	if len(fields) != len(dest) {
		return false
	}
	for i, d := range dest {
		var want uint32
		switch d.(type) {
		case *pgtype.Int8:
			want = pgtype.Int8OID
		case *int32:
			want = pgtype.Int4OID
		case *bool:
			want = pgtype.BoolOID
		case *string:
			want = pgtype.TextOID
		}
		if fields[i].DataTypeOID != want {
			return false
		}
	}
	return true
}

// decodeRow reads a row of binary values into dest (types as checked by
// columnsFit). Only a *pgtype.Int8 takes NULL.
func decodeRow(vals [][]byte, dest []any) error {
	if len(vals) != len(dest) {
		return fmt.Errorf("pglock: %d columns, want %d", len(vals), len(dest))
	}
	for i, v := range vals {
		if v == nil {
			if d, ok := dest[i].(*pgtype.Int8); ok {
				*d = pgtype.Int8{}
				continue
			}
			return fmt.Errorf("pglock: column %d is NULL", i)
		}
		switch d := dest[i].(type) {
		case *pgtype.Int8:
			if len(v) != 8 {
				return badLength(i, len(v))
			}
			*d = pgtype.Int8{Int64: int64(binary.BigEndian.Uint64(v)), Valid: true}
		case *int32:
			if len(v) != 4 {
				return badLength(i, len(v))
			}
			*d = int32(binary.BigEndian.Uint32(v))
		case *bool:
			if len(v) != 1 {
				return badLength(i, len(v))
			}
			*d = v[0] != 0
		case *string:
			*d = string(v)
		default:
			return fmt.Errorf("pglock: column %d: cannot decode into %T", i, d)
		}
	}
	return nil
}

func badLength(col, n int) error {
	return fmt.Errorf("pglock: column %d: %d bytes in the binary format", col, n)
}
