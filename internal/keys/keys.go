// Package keys derives the auxiliary Redis keys that sit beside a lock key.
//
// The lock key itself is exactly the resource name (plus the user's prefix)
// and holds the token, as in node-redlock and redsync, so mixed fleets
// exclude each other. Everything else dlock stores lives in keys derived
// here, which hash to the same Redis Cluster slot as the lock key so that one
// script can touch both.
package keys

import "strings"

// Fence returns the key of the fence counter for lockKey. If lockKey has a
// Cluster hash tag ("{...}" with something inside), the counter key keeps it;
// otherwise the whole lock key becomes the hash tag. Either way both keys
// hash to the same slot. Keys containing '}' but no valid hash tag cannot be
// tagged this way; on a Cluster their scripts fail with CROSSSLOT.
func Fence(lockKey string) string { return derive("dlock:fence:", lockKey) }

// RedlockFence returns the key of Redlock's per-node fence counter for
// lockKey: a hash of the counter and the epoch it was written under, so it
// is a different key from the single-node counter (a plain integer).
func RedlockFence(lockKey string) string { return derive("dlock:redlock:fence:", lockKey) }

// Holder returns the key where a holder may publish who it is (host, pid,
// since) for `dlock inspect`.
func Holder(lockKey string) string { return derive("dlock:holder:", lockKey) }

// Channel returns the pub/sub channel on which releases of lockKey are
// announced.
func Channel(lockKey string) string { return derive("dlock:released:", lockKey) }

func derive(prefix, lockKey string) string {
	if HasHashTag(lockKey) {
		return prefix + lockKey
	}
	return prefix + "{" + lockKey + "}"
}

// HasHashTag reports whether key has a Redis Cluster hash tag: a '{'
// followed later by a '}' with at least one character between them.
func HasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(key[open+1:], '}')
	return end > 0
}
