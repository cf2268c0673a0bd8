package dlocktest_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The package builds on the standard library and dlock's public API only
// (dlock and driver), as a backend written elsewhere would: a test of the
// user's pulls in no dependency, and the conformance suite's run on it
// proves the suite for backends outside this repository.
func TestPublicAPIOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") &&
			!slices.Contains([]string{"github.com/dlock-go/dlock", "github.com/dlock-go/dlock/driver"}, imp) {
			t.Errorf("dlocktest imports %s: only the standard library, dlock and driver are allowed", imp)
		}
	}
}
