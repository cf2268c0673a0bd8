package pglock

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The hand-coded row path refuses what it cannot read exactly (the caller
// then goes through QueryRow, or reports the error), instead of guessing.
func TestRowCodec(t *testing.T) {
	var b rowBufs
	n, a := int64(-2), int32(-3)
	params, ok := b.encode([]uint32{pgtype.Int4OID, pgtype.Int4OID, pgtype.TextOID}, []any{&a, &a, "90s"})
	if !ok || len(params) != 3 || string(params[0]) != "\xff\xff\xff\xfd" || string(params[2]) != "90s" {
		t.Fatalf("encode pair and text: %q, %v", params, ok)
	}
	params, ok = b.encode([]uint32{pgtype.Int8OID}, []any{&n})
	if !ok || string(params[0]) != "\xff\xff\xff\xff\xff\xff\xff\xfe" {
		t.Fatalf("encode bigint: %q, %v", params, ok)
	}
	for _, bad := range []struct {
		oids []uint32
		args []any
	}{
		{[]uint32{pgtype.Int8OID}, []any{&a}},     // int4 where int8 is wanted
		{[]uint32{pgtype.Int4OID}, []any{"7"}},    // text where int4 is wanted
		{[]uint32{pgtype.BoolOID}, []any{&n}},     // a type it does not encode
		{[]uint32{pgtype.Int8OID}, []any{&n, &n}}, // count mismatch
	} {
		if _, ok := b.encode(bad.oids, bad.args); ok {
			t.Errorf("encode(%v, %T...) accepted", bad.oids, bad.args[0])
		}
	}

	var fence pgtype.Int8
	var pid int32
	var flag bool
	var prev string
	fields := func(oids ...uint32) []pgconn.FieldDescription {
		f := make([]pgconn.FieldDescription, len(oids))
		for i, o := range oids {
			f[i].DataTypeOID = o
		}
		return f
	}
	dest := []any{&fence, &pid, &flag, &prev}
	if !columnsFit(fields(pgtype.Int8OID, pgtype.Int4OID, pgtype.BoolOID, pgtype.TextOID), dest) {
		t.Fatal("columnsFit refused matching columns")
	}
	if columnsFit(fields(pgtype.Int4OID, pgtype.Int4OID, pgtype.BoolOID, pgtype.TextOID), dest) ||
		columnsFit(fields(pgtype.Int8OID, pgtype.Int4OID), dest) {
		t.Fatal("columnsFit accepted other columns")
	}

	row := [][]byte{{0, 0, 0, 0, 0, 0, 1, 0}, {0, 0, 0, 42}, {1}, []byte("0")}
	if err := decodeRow(row, dest); err != nil || !fence.Valid || fence.Int64 != 256 || pid != 42 || !flag || prev != "0" {
		t.Fatalf("decodeRow: %v %v %d %v %q", err, fence, pid, flag, prev)
	}
	if err := decodeRow([][]byte{nil, {0, 0, 0, 1}}, dest[:2]); err != nil || fence.Valid {
		t.Fatalf("NULL fence: %v, %v", err, fence)
	}
	for _, bad := range [][][]byte{
		{{0, 0, 0, 1}, nil},                // NULL pid
		{{0, 0, 0, 1}, {0, 0, 0, 1}},       // 4-byte fence
		{{0, 0, 0, 0, 0, 0, 0, 1}, {0, 1}}, // 2-byte pid
		{{0, 0, 0, 0, 0, 0, 0, 1}},         // a column short
	} {
		if err := decodeRow(bad, dest[:2]); err == nil {
			t.Errorf("decodeRow(%q) accepted", bad)
		}
	}
}
