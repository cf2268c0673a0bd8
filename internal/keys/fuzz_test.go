package keys

import (
	"strings"
	"testing"
)

// FuzzSameSlot: every key derived from a lock key hashes to the lock key's
// Redis Cluster slot, as its scripts need, for any key whose hash tag is
// valid or that has no '}' (the documented exception), and keeps its
// prefix (the empty key is no lock key). The tag rule is Redis's keyHashSlot, written out here apart from
// HasHashTag.
func FuzzSameSlot(f *testing.F) {
	f.Fuzz(func(t *testing.T, key string) {
		if key == "" {
			t.Skip("not a lock key (bridge.KeyProblem refuses it)")
		}
		if strings.Contains(key, "}") && !HasHashTag(key) {
			t.Skip("a '}' without a valid hash tag cannot be tagged (documented)")
		}
		for prefix, derive := range map[string]func(string) string{
			"dlock:fence:": Fence, "dlock:waiters:": Queue, "dlock:holder:": Holder, "dlock:limit:": Limit,
		} {
			d := derive(key)
			if !strings.HasPrefix(d, prefix) || d == key {
				t.Fatalf("%s(%q) = %q", prefix, key, d)
			}
			if got, want := hashed(d), hashed(key); got != want {
				t.Fatalf("%q derived from %q hashes %q, the lock key %q", d, key, got, want)
			}
		}
	})
}

// hashed is the part of key that Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, if not empty, else the key.
func hashed(key string) string {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return key
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 {
		return key
	}
	return key[s+1 : s+1+e]
}

// FuzzDistinct: two lock keys never share a derived key.
func FuzzDistinct(f *testing.F) {
	f.Add("a", "{a}")
	f.Add("x{a}", "{x{a}")
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == b {
			return
		}
		if Fence(a) == Fence(b) || Queue(a) == Queue(b) || Holder(a) == Holder(b) {
			t.Fatalf("%q and %q share derived keys: %q", a, b, Fence(a))
		}
	})
}
