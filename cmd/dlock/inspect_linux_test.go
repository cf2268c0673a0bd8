package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestInspectWatchTerminal: on a terminal, --watch clears the screen and
// redraws the table under a line with the time; into a buffer (no
// terminal) the tables follow one another without escapes.
func TestInspectWatchTerminal(t *testing.T) {
	t.Parallel()
	srv := testsrv.StartRedis(t)
	srv.Client(t).Set(context.Background(), "tw:a", "x", time.Minute)
	env := []string{"DLOCK_REDIS=" + srv.URL()}
	watch := func(stdout io.Writer) int {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		var stderr bytes.Buffer
		code := run(ctx, []string{"inspect", "tw:*", "--watch", "100ms"}, env, nil, stdout, &stderr)
		if code != 0 {
			t.Errorf("inspect --watch: exit %d\n%s", code, stderr.String())
		}
		return code
	}

	var buf bytes.Buffer
	watch(&buf)
	if n := strings.Count(buf.String(), "KEY"); n < 2 || strings.Contains(buf.String(), "\x1b") || strings.Contains(buf.String(), "every ") {
		t.Errorf("--watch into a buffer: %d tables, want at least 2, without escapes or time lines:\n%q", n, buf.String())
	}

	ptm, pts := openPTY(t)
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptm) // until the terminal is closed (EIO)
		out <- string(b)
	}()
	watch(pts)
	pts.Close()
	screen := <-out
	if n := strings.Count(screen, "\x1b[H\x1b[2J"); n < 2 || strings.Count(screen, "tw:a") != n || strings.Count(screen, "every 100ms, ") != n {
		t.Errorf("--watch on a terminal drew %d screens in 700ms (want at least 2, each with a time line and the lock):\n%q", n, screen)
	}
}

// openPTY opens a pseudo-terminal: what is written to pts (the terminal a
// program sees) is read from ptm. Both are closed when the test ends.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal (/dev/ptmx): %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	return ptm, pts
}
