package pglock

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// rowBufs are one statement's encoded arguments, kept in the grant so that
// encoding them allocates nothing.
type rowBufs struct {
	params [5][]byte
	ints   [16]byte
}

// queryRow runs an acquiring or releasing statement as
// conn.QueryRow(ctx, sql, args...).Scan(dest...) would. With direct, and
// exactly the expected types, it encodes and decodes them by hand in the
// binary format, past pgx's per-call type mapping (bench/RESULTS.md).
// args are *int64, *int32 or string; dest *pgtype.Int8, *int32, *bool or
// *string.
func queryRow(ctx context.Context, direct bool, conn *pgx.Conn, sql string, b *rowBufs, args, dest []any) error {
	if !direct {
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
	// Rows past the first are read and dropped, as QueryRow's Scan does.
	rr := conn.PgConn().ExecStatement(ctx, sd, params, binaryFormat, binaryFormat)
	derr := pgx.ErrNoRows
	if rr.NextRow() {
		derr = decodeRow(rr.Values(), dest)
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	return derr
}

var binaryFormat = []int16{1} // one code: every parameter and column binary

// encode writes args in the binary format of their parameter types, or
// returns false when one does not match.
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

// columnsFit reports whether fields have the types decodeRow reads into
// dest.
func columnsFit(fields []pgconn.FieldDescription, dest []any) bool {
	if len(fields) != len(dest) {
		return false
	}
	for i, d := range dest {
		if oid, _ := column(d); fields[i].DataTypeOID != oid {
			return false
		}
	}
	return true
}

// column returns the column type decodeRow reads into d and its binary
// size (-1: any).
func column(d any) (oid uint32, size int) {
	switch d.(type) {
	case *pgtype.Int8:
		return pgtype.Int8OID, 8
	case *int32:
		return pgtype.Int4OID, 4
	case *bool:
		return pgtype.BoolOID, 1
	case *string:
		return pgtype.TextOID, -1
	}
	return 0, 0
}

// decodeRow reads a row of binary values into dest (see columnsFit). Only
// a *pgtype.Int8 takes NULL.
func decodeRow(vals [][]byte, dest []any) error {
	if len(vals) != len(dest) {
		return fmt.Errorf("pglock: %d columns, want %d", len(vals), len(dest))
	}
	for i, v := range vals {
		d, isInt8 := dest[i].(*pgtype.Int8)
		switch _, size := column(dest[i]); {
		case v == nil && isInt8:
			*d = pgtype.Int8{}
			continue
		case v == nil:
			return fmt.Errorf("pglock: column %d is NULL", i)
		case size >= 0 && len(v) != size:
			return fmt.Errorf("pglock: column %d: %d bytes in the binary format", i, len(v))
		}
		switch d := dest[i].(type) {
		case *pgtype.Int8:
			*d = pgtype.Int8{Int64: int64(binary.BigEndian.Uint64(v)), Valid: true}
		case *int32:
			*d = int32(binary.BigEndian.Uint32(v))
		case *bool:
			*d = v[0] != 0
		case *string:
			*d = string(v)
		default:
			return fmt.Errorf("pglock: column %d: cannot decode into %T", i, d)
		}
	}
	return nil
}
