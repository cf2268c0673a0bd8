package rnode

import "testing"

// FuzzAcquireReply: whatever the acquire script's reply holds (a server
// that is not Redis, a script of another version), reading it never panics,
// and a reply it accepts as a grant carries a positive fence.
func FuzzAcquireReply(f *testing.F) {
	f.Add(int64(1), int64(1796160179336824), "", 4)
	f.Add(int64(0), int64(0), "holder-token", 4)
	f.Add(int64(2), int64(0), "", 4)
	f.Add(int64(1), int64(0), "1796160179336824", 3)
	f.Add(int64(1), int64(0), "-5", 0)
	f.Fuzz(func(t *testing.T, status, fence int64, s string, n int) {
		v := []any{status, fence, int64(-1), int64(0)}
		if status != Granted {
			v[1] = s
		}
		if n >= 0 && n < len(v) {
			v = v[:n]
		}
		for _, reply := range []any{v, s} { // the general reply, and the uncontended grant's fence alone
			r, err := acquireReply(reply)
			if err == nil && r.Status == Granted && r.Fence <= 0 {
				t.Fatalf("grant with fence %d accepted from %v", r.Fence, reply)
			}
		}
	})
}
