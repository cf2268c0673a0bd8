package pglock_test

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/pglock"
)

// HashKey is the documented hash: SQL computes the same bigint, so psql and
// other languages can take the same lock. The pinned values catch an
// accidental change of the function, which would split a fleet in two.
func TestHashKey(t *testing.T) {
	pool := shared.Pool(t, 1)
	for _, tc := range []struct {
		name string
		want int64 // 0: not pinned, only compared with SQL
	}{
		{"a", -3848465438864589366},
		{"invoice:2026-11", 0},
		{"ünïcødé 🔒", 0},
		{strings.Repeat("long", 5000), 0},
		{"with\nnewline and 'quote'", 0},
	} {
		k := pglock.HashKey(tc.name)
		got, ok := k.Int64()
		if !ok {
			t.Fatalf("HashKey(%.20q) is not a bigint key", tc.name)
		}
		var sql int64
		err := pool.QueryRow(testCtx(t),
			`SELECT ('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint`, tc.name).Scan(&sql)
		if err != nil {
			t.Fatal(err)
		}
		if got != sql {
			t.Errorf("HashKey(%.20q) = %d, the documented SQL says %d", tc.name, got, sql)
		}
		if tc.want != 0 && got != tc.want {
			t.Errorf("HashKey(%q) = %d, pinned value %d: the hash changed", tc.name, got, tc.want)
		}
		if k.String() != tc.name {
			t.Errorf("HashKey(%.20q).String() = %.20q, want the name", tc.name, k.String())
		}
	}
}

func TestKeyForms(t *testing.T) {
	for _, tc := range []struct {
		k      pglock.Key
		name   string
		isPair bool
	}{
		{pglock.Int64Key(-5), "int64:-5", false},
		{pglock.KeyPair(-1, 2147483647), "pair:-1,2147483647", true},
		{pglock.HashKey("x"), "x", false},
	} {
		if tc.k.String() != tc.name {
			t.Errorf("String() = %q, want %q", tc.k.String(), tc.name)
		}
		_, _, isPair := tc.k.Pair()
		_, isInt := tc.k.Int64()
		if isPair != tc.isPair || isInt == tc.isPair {
			t.Errorf("%v: Pair ok %v, Int64 ok %v", tc.k, isPair, isInt)
		}
	}
	if n, _ := pglock.Int64Key(-5).Int64(); n != -5 {
		t.Errorf("Int64Key(-5).Int64() = %d", n)
	}
	if a, b, _ := pglock.KeyPair(-1, 7).Pair(); a != -1 || b != 7 {
		t.Errorf("KeyPair(-1, 7).Pair() = %d, %d", a, b)
	}
}
