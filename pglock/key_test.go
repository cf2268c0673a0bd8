package pglock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
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

// Lock names are hashed, never sent as text, so bytes PostgreSQL's text
// cannot hold (NUL, invalid UTF-8) and control bytes work like any other
// name: each is its own lock, exclusive, woken on release, with one-line
// errors; and SQL computes the same key from the name's bytes.
func TestKeysWithControlBytes(t *testing.T) {
	names := []string{"\x00", "a\x00b", "a\x00c", "a", "\x01", "\x01\x01", "line\nbreak", "\xff\xfe", "i42", "p1,2"}
	a, b := newLocker(t, int32(len(names))), newLocker(t, 2)
	pool := shared.Pool(t, 1)
	held := make([]*dlock.Lock, len(names))
	seen := map[int64]string{}
	for i, name := range names {
		k := pglock.HashKey(name)
		n, _ := k.Int64()
		if prev, dup := seen[n]; dup {
			t.Fatalf("HashKey(%q) = HashKey(%q)", name, prev)
		}
		seen[n] = name
		var sql int64
		err := pool.QueryRow(testCtx(t),
			`SELECT ('x' || left(encode(sha256($1::bytea), 'hex'), 16))::bit(64)::bigint`, []byte(name)).Scan(&sql)
		if err != nil || sql != n {
			t.Fatalf("HashKey(%q) = %d; SQL over its bytes: %d, %v", name, n, sql, err)
		}
		held[i] = lockcheck.MustAcquire(t, a, name, 10*time.Second)
	}
	// Every name is held at once (no two share a lock), and only once.
	for _, name := range names {
		_, err := b.TryAcquire(testCtx(t), name, time.Second)
		wantSentinel(t, err, dlock.ErrNotAcquired)
	}
	// A waiter on a NUL name is woken by its release, long before its
	// poll; the releases of its neighbours come first and must not let it
	// in.
	got := make(chan error, 1)
	go func() {
		lock, err := dlock.Acquire(testCtx(t), b, "a\x00b", time.Second, dlock.WithRetryDelay(10*time.Second))
		if err == nil {
			err = lock.Release(context.Background())
		}
		got <- err
	}()
	waitFor(t, "the waiter's listener", func() bool {
		locks, err := shared.AdvisoryLocks(testCtx(t))
		if err != nil {
			return false
		}
		for _, l := range locks {
			if l.Int64() == pglock.WaitKey && l.Granted {
				return true
			}
		}
		return false
	})
	for _, i := range []int{2, 3, 0, 1} { // a\x00c, a, \x00, then a\x00b
		if err := held[i].Release(testCtx(t)); err != nil {
			t.Fatalf("Release(%q): %v", names[i], err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter on %q: %v", "a\x00b", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter on a NUL name was not woken by its release")
	}
	for _, l := range held[4:] {
		if err := l.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// WithPrefix keeps two applications' names apart: the lock taken is
// HashKey(prefix+name), the handle names the lock without the prefix, and
// only a Locker with the same prefix contends for it.
func TestPrefix(t *testing.T) {
	name := uniqueKey(t)
	billing := newLocker(t, 2, pglock.WithPrefix("billing:"))
	lock := lockcheck.MustAcquire(t, billing, name, 10*time.Second)
	if lock.Key() != name {
		t.Fatalf("Key() = %q, want %q", lock.Key(), name)
	}
	holderPID(t, pglock.HashKey("billing:"+name)) // fails unless pg_locks shows it
	other := newLocker(t, 2, pglock.WithPrefix("mail:"))
	lockcheck.MustAcquire(t, other, name, 10*time.Second).Release(testCtx(t))
	_, err := newLocker(t, 2, pglock.WithPrefix("billing:")).TryAcquire(testCtx(t), name, time.Second)
	wantIs(t, err, dlock.ErrNotAcquired)
	_, err = newLocker(t, 2).TryAcquire(testCtx(t), "billing:"+name, time.Second)
	wantIs(t, err, dlock.ErrNotAcquired)
}
