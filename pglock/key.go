package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
)

// Key is a position in PostgreSQL's advisory-lock key space: one bigint
// (pg_advisory_lock's one-argument form) or a pair of int4 (the two-argument
// form), separate key spaces: HashKey("x") never collides with any KeyPair.
// A Key is a small value, safe to copy and to use concurrently.
type Key struct {
	name string // names the key in handles and messages
	n    int64  // the bigint form
	a, b int32  // the pair form
	pair bool
}

// waitKey is the bigint advisory key release listeners hold in share mode
// while anyone waits (notify.go): bytes 8 to 15 of the SHA-256 of "pglock
// waiters", so a HashKey name maps to it only by a 2^-64 chance.
const waitKey int64 = -3089797466993508641

// HashKey maps a lock name to a bigint advisory key: the first 8 bytes of
// the SHA-256 of the name's UTF-8 bytes, read as a big-endian two's
// complement int64. SQL computes the same key, so psql and other languages
// can take the same lock:
//
//	('x' || left(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 16))::bit(64)::bigint
//
// A name is only hashed, never sent to the server, so any bytes work,
// including NUL and invalid UTF-8, which a PostgreSQL text value cannot
// hold; SQL hashes such a name as bytea: sha256($1::bytea).
//
// Two names whose hashes collide share a lock: with n names in use, any
// two collide with a probability of about n²/2^65 (3·10⁻⁸ for a million).
// A collision only makes two names exclude each other.
func HashKey(name string) Key {
	sum := sha256.Sum256([]byte(name))
	return Key{name: name, n: int64(binary.BigEndian.Uint64(sum[:8]))}
}

// Int64Key is the bigint advisory key n, for schemes that already number
// their locks. Its name (String) is "int64:<n>".
func Int64Key(n int64) Key {
	return Key{name: "int64:" + strconv.FormatInt(n, 10), n: n}
}

// KeyPair is the two-int4 advisory key (a, b), as taken by
// pg_advisory_lock(a, b) — for example a table's oid and a row id. Its
// name (String) is "pair:<a>,<b>".
func KeyPair(a, b int32) Key {
	return Key{name: fmt.Sprintf("pair:%d,%d", a, b), a: a, b: b, pair: true}
}

// String returns the name the key goes by in handles and messages: the lock
// name for HashKey, "int64:<n>" or "pair:<a>,<b>" otherwise.
func (k Key) String() string { return k.name }

// Int64 returns the bigint key, and false for a pair.
func (k Key) Int64() (int64, bool) { return k.n, !k.pair }

// Pair returns the two int4 keys, and false for a bigint key.
func (k Key) Pair() (a, b int32, ok bool) { return k.a, k.b, k.pair }

func (k Key) valid() bool { return k.name != "" }

// form indexes statements: 0 for a bigint key, 1 for a pair.
func (k Key) form() int {
	if k.pair {
		return 1
	}
	return 0
}

// args appends the key's statement arguments to dst, as pointers into k:
// passing them allocates nothing.
func (k *Key) args(dst []any) []any {
	if k.pair {
		return append(dst, &k.a, &k.b)
	}
	return append(dst, &k.n)
}

// lockID returns how pg_locks shows the key: classid, objid and objsubid.
func (k Key) lockID() (classid, objid int64, objsubid int16) {
	if k.pair {
		return int64(uint32(k.a)), int64(uint32(k.b)), 2
	}
	u := uint64(k.n)
	return int64(u >> 32), int64(u & 0xffffffff), 1
}

// notifyID names the key in release notifications, as the release
// statement does in SQL: short, whatever the length of the lock name.
func (k Key) notifyID() string {
	if k.pair {
		return "p" + strconv.FormatInt(int64(k.a), 10) + "," + strconv.FormatInt(int64(k.b), 10)
	}
	return "i" + strconv.FormatInt(k.n, 10)
}
