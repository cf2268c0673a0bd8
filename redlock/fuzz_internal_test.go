package redlock

import (
	"strings"
	"testing"
)

// FuzzRunID: reading run_id from any INFO reply never panics, and finds the
// value it was given in a well-formed one.
func FuzzRunID(f *testing.F) {
	f.Add("# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c0c7e\r\ntcp_port:6379\r\n", "4f1c0c7e")
	f.Add("run_id:", "")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, info, id string) {
		_ = runID(info)
		if strings.ContainsAny(id, "\r\n") || strings.Contains(info, "run_id:") {
			return
		}
		if got := runID(info + "\r\nrun_id:" + id + "\r\n"); got != id {
			t.Fatalf("runID found %q, want %q", got, id)
		}
	})
}

// FuzzParseAcquire: parsing any reply of a node never panics, and a grant
// it accepts carries a positive fence.
func FuzzParseAcquire(f *testing.F) {
	f.Add(int64(1), int64(1796160179336824), "", 4)
	f.Add(int64(0), int64(0), "holder", 4)
	f.Add(int64(-1), int64(0), "", 2)
	f.Fuzz(func(t *testing.T, status, fence int64, holder string, n int) {
		v := []any{status, fence, int64(-1), int64(0)}
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
