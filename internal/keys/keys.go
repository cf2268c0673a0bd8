// Package keys derives the auxiliary Redis keys that sit beside a lock key.
//
// The lock key itself is exactly the resource name (plus the user's prefix)
// and holds the token, as in node-redlock and redsync, so mixed fleets
// exclude each other. Everything else dlock stores lives in keys derived
// here, which hash to the same Redis Cluster slot as the lock key so that one
// script can touch both.
package keys

import (
	"strings"

	"github.com/dlock-go/dlock/driver"
)

// Fence returns the key of the fence counter for lockKey.
func Fence(lockKey string) string { return derive("dlock:fence:", lockKey) }

// Queue returns the key of lockKey's waiter queue.
func Queue(lockKey string) string { return derive("dlock:waiters:", lockKey) }

// Holder returns the key where a holder may publish who it is (host, pid,
// since) for `dlock inspect`.
func Holder(lockKey string) string { return derive("dlock:holder:", lockKey) }

// derive names a key beside lockKey in its Cluster slot. A lock key without
// a hash tag becomes the tag: prefix+"{"+lockKey+"}". One with a tag keeps
// it, behind "t:": prefix+"t:"+lockKey. The "t:" keeps the two forms apart,
// so that no two lock keys share a derived key ("a" and "{a}" would
// otherwise both give prefix+"{a}"). Keys containing '}' but no valid hash
// tag cannot be tagged either way; on a Cluster their scripts fail with
// CROSSSLOT.
func derive(prefix, lockKey string) string {
	if HasHashTag(lockKey) {
		return prefix + "t:" + lockKey
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

// Reserved is the namespace of dlock's own keys on a Redis server (fence
// counters, waiter queues, holder records). No lock key may lie inside it.
const Reserved = "dlock:"

// Check rejects a lock name that is empty, or that would put the lock key
// (prefix+key) inside dlock's own namespace, where it could name a fence
// counter or a waiter queue: releasing "dlock:fence:{foo}" would reset
// foo's fences. Both errors match dlock.ErrInvalid.
func Check(prefix, key string) error {
	if err := driver.CheckKey(key); err != nil {
		return err
	}
	if strings.HasPrefix(prefix+key, Reserved) {
		return driver.Invalidf("lock key %q: the %q namespace is reserved for dlock's own keys", prefix+key, Reserved)
	}
	return nil
}

// CheckPrefix rejects a key prefix inside dlock's own namespace. (A prefix
// that only starts it, such as "dl", is caught by Check with the key.)
func CheckPrefix(prefix string) error {
	if strings.HasPrefix(prefix, Reserved) {
		return driver.Invalidf("prefix %q: the %q namespace is reserved for dlock's own keys", prefix, Reserved)
	}
	return nil
}
