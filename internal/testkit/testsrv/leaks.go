package testsrv

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// VerifyTestMain runs m's tests and then, like goleak.VerifyTestMain,
// fails the run if a goroutine is left; but it first waits up to settle
// for goroutines that end on their own a moment after their server has
// stopped (an embedded etcd's peer connections close in the background,
// about a second after it returns from Close). It exits the process.
func VerifyTestMain(m *testing.M, settle time.Duration, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(settle)
		err := goleak.Find(opts...)
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			err = goleak.Find(opts...)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run, after waiting %v: %v\n", settle, err)
			code = 1
		}
	}
	os.Exit(code)
}
