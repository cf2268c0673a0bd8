package backend

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
)

// FuzzCheckKey: a lock key that a Config of the Redis and etcd backends
// accepts (its prefix set, then the key checked) never lies in dlock's own
// namespace, and every rejection matches dlock.ErrInvalid.
func FuzzCheckKey(f *testing.F) {
	f.Add("", "invoice:4821")
	f.Add("dl", "ock:fence:{x}")
	f.Add("locks:", "dlock:waiters:{x}")
	f.Add("", "\x00dlock:")
	f.Fuzz(func(t *testing.T, prefix, key string) {
		c := New(0, true)
		err := c.SetPrefix(prefix)
		if err == nil {
			err = c.CheckKey(key)
		}
		if err != nil && !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("prefix %q, key %q: %v, not ErrInvalid", prefix, key, err)
		}
		if err == nil && (key == "" || strings.HasPrefix(prefix+key, keys.Reserved)) {
			t.Fatalf("prefix %q, key %q: accepted a key in dlock's namespace or an empty one", prefix, key)
		}
	})
}
