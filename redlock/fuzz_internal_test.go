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
