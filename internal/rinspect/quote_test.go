package rinspect

import "testing"

// A prefix's glob characters match only themselves in SCAN's MATCH.
func TestGlobQuoter(t *testing.T) {
	if got, want := globQuoter.Replace(`a*b?[c]\d`), `a\*b\?\[c\]\\d`; got != want {
		t.Fatalf("quoted %q, want %q", got, want)
	}
}
