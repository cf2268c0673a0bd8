package keys

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

// FuzzCheck: a lock key that Check accepts never lies in dlock's own
// namespace, and every rejection matches dlock.ErrInvalid.
func FuzzCheck(f *testing.F) {
	f.Add("", "invoice:4821")
	f.Add("dl", "ock:fence:{x}")
	f.Add("locks:", "dlock:waiters:{x}")
	f.Add("", "\x00dlock:")
	f.Fuzz(func(t *testing.T, prefix, key string) {
		err := Check(prefix, key)
		if err != nil && !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("Check(%q, %q) = %v, not ErrInvalid", prefix, key, err)
		}
		if err == nil && (key == "" || strings.HasPrefix(prefix+key, Reserved)) {
			t.Fatalf("Check(%q, %q) accepted a key in dlock's namespace or an empty one", prefix, key)
		}
	})
}
