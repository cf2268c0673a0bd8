// Package pgmigrate makes the schema changes of pglock, pgqueue and
// fence/pgfence safe when several processes make them at once, and checks
// the database handles they are given.
package pgmigrate

import (
	"strconv"
)

// Serialized makes a CREATE ... IF NOT EXISTS safe to run from several
// sessions at once: on its own, two sessions that both find the object
// missing both insert it into the catalog, and the second fails with a
// unique violation (23505 on pg_class_relname_nsp_index or
// pg_type_typname_nsp_index). Each first takes a transaction-level
// advisory lock on Key in the same implicit transaction (one query, sent
// by the simple protocol as a statement without arguments is), so the
// next runs after the first committed. In a caller's transaction the lock
// lasts until that transaction ends.
func Serialized(create string) string {
	return "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(Key, 10) + "); " + create
}

// Key is the bigint advisory key held while schema objects are created:
// bytes 8 to 15 of the SHA-256 of "pglock migrate", made as pglock's key
// for its waiters is.
const Key int64 = -2338369163326999730
