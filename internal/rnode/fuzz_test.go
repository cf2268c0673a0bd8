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

// FuzzSemaphoreReply: whatever the semaphore script's reply holds,
// reading it never panics, and a reply it accepts as a grant carries a
// positive fence and a slot.
func FuzzSemaphoreReply(f *testing.F) {
	f.Add(int64(1), int64(1796160179336824), "", int64(0), 5)
	f.Add(int64(0), int64(0), "holder-token", int64(-1), 5)
	f.Add(int64(3), int64(7), "", int64(-1), 5)
	f.Add(int64(1), int64(0), "1796160179336824", int64(2), 4)
	f.Fuzz(func(t *testing.T, status, x int64, s string, slot int64, n int) {
		for _, v := range [][]any{{status, x, int64(-1), int64(0), slot}, {status, s, int64(-1), int64(0), slot}} {
			if n >= 0 && n < len(v) {
				v = v[:n]
			}
			r, err := semaphoreReply(v)
			if err == nil && r.Status == Granted && (r.Fence <= 0 || r.Slot < 0) {
				t.Fatalf("grant with fence %d on slot %d accepted from %v", r.Fence, r.Slot, v)
			}
			if err == nil && r.Holder != "" && r.Status != Busy {
				t.Fatalf("holder %q read from a reply of status %d", r.Holder, r.Status)
			}
		}
	})
}
