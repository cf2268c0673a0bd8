package redislock

import (
	"testing"
)

// FuzzParseAcquire: whatever the acquire script's reply holds (a server
// that is not Redis, a script of another version), parsing it never panics,
// and a reply it accepts as a grant carries a positive fence.
func FuzzParseAcquire(f *testing.F) {
	f.Add(int64(1), int64(1796160179336824), "", int64(-1), int64(0), 4)
	f.Add(int64(0), int64(0), "holder-token", int64(1234), int64(3), 4)
	f.Add(int64(2), int64(0), "", int64(-1), int64(7), 4)
	f.Add(int64(1), int64(0), "", int64(-1), int64(0), 3)
	f.Fuzz(func(t *testing.T, status, fence int64, holder string, expiry, place int64, n int) {
		v := []any{status, fence, expiry, place}
		if status != 1 {
			v[1] = holder
		}
		if n >= 0 && n < len(v) {
			v = v[:n]
		}
		r, err := parseAcquire(v)
		if err == nil && r.status == 1 && r.fence <= 0 {
			t.Fatalf("grant with fence %d accepted from %v", r.fence, v)
		}
		r, err = parseAcquire(holder) // the uncontended grant's reply: the fence alone
		if err == nil && r.status == 1 && r.fence <= 0 {
			t.Fatalf("grant with fence %d accepted from %v", r.fence, v)
		}
	})
}
