//go:build !linux

package main

import (
	"io"
	"os"
	"syscall"
)

// selfExe is the path of dlock's own binary.
func selfExe() (string, error) { return os.Executable() }

// dieWithParent has no portable equivalent outside Linux.
func dieWithParent(*syscall.SysProcAttr) {}

// becomeSubreaper has no portable equivalent outside Linux: orphans go to
// init, out of the supervisor's reach.
func becomeSubreaper() {}

// killChildren has nothing to do outside Linux: without a subreaper, the
// supervisor's only child is the command.
func killChildren() {}

// killGroupAfterExit kills what the command left running in its process
// group, once the command (its leader) was reaped. The group's id could in
// principle have been reused in between, as the pid of a new group's
// leader; the window is the few microseconds since the reap.
func killGroupAfterExit(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// foregroundTTY is only implemented on Linux; elsewhere an interactive
// command runs in a background process group.
func foregroundTTY(io.Reader) int { return -1 }

func restoreForeground(int) {}

// isTerminal reports whether w is a character device, the portable
// approximation of a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
