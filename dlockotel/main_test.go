package dlockotel_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestMain starts the redis-server the examples use ($REDIS_ADDR) and
// checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlockotel-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := testsrv.NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", srv.Addr)
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
