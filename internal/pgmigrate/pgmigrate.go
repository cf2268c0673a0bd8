// Package pgmigrate makes the schema changes of pglock, pgqueue and
// fence/pgfence safe when several processes make them at once.
package pgmigrate

import "strconv"

// Serialized makes a CREATE ... IF NOT EXISTS safe to run from several
// sessions at once: two sessions that both find the object missing both
// insert it into the catalog, and the second fails with a unique violation
// (23505). Each first takes a transaction-level advisory lock on Key in the
// same implicit transaction (one simple-protocol query), so the next runs
// after the first committed; in a caller's transaction, until it ends.
func Serialized(create string) string {
	return "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(Key, 10) + "); " + create
}

// Key is the advisory key held while schema objects are created: bytes 8
// to 15 of the SHA-256 of "pglock migrate".
const Key int64 = -2338369163326999730
