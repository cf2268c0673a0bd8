// Package keys derives the Redis keys that sit beside a lock key, in its
// Cluster slot so that one script can touch both (see Keys in package
// redislock).
package keys

import "strings"

// Fence returns the key of the fence counter for lockKey.
func Fence(lockKey string) string { return derive("dlock:fence:", lockKey) }

// Fences returns the fence counters of lockKeys, in order.
func Fences(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = Fence(k)
	}
	return out
}

// Queue returns the key of lockKey's waiter queue.
func Queue(lockKey string) string { return derive("dlock:waiters:", lockKey) }

// Limit returns the key of the limit record of the semaphore whose slot
// keys begin with slotPrefix.
func Limit(slotPrefix string) string { return derive("dlock:limit:", slotPrefix) }

// Holder returns the key of lockKey's holder record.
func Holder(lockKey string) string { return derive("dlock:holder:", lockKey) }

// derive names a key beside lockKey in its Cluster slot: lockKey becomes
// the hash tag, or keeps its own behind "t:", so that "a" and "{a}" derive
// different keys. A key with a '}' but no valid tag cannot be tagged
// either way; on a Cluster its scripts fail with CROSSSLOT.
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
	return open >= 0 && strings.IndexByte(key[open+1:], '}') > 0
}

// Reserved is the namespace of dlock's own keys, where no lock key may lie.
const Reserved = "dlock:"
