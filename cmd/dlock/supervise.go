package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// superviseArg, as its first argument, makes the dlock binary the process
// that dlock run puts between itself and the command (see supervise).
const superviseArg = "run-supervisor"

// controlFD is the supervisor's descriptor of the read end of a pipe whose
// write end only dlock run holds: it reads end of file when dlock closes it
// or dies, however it dies.
const controlFD = 3

// supervise is the supervising process of one dlock run: it starts the
// command in a process group of its own (with the terminal, when args[0]
// is "tty"), relays to that group the signals dlock forwards to it, and
// exits with the command's status (128+N for death by signal N) once every
// process the command started is gone. When the command exits it kills what
// the command left running; when dlock closes the control pipe, or dies,
// it kills the command and everything it started, at once. args are the
// mode ("tty" or "-"), the command's path, and its argv.
//
// On Linux the supervisor is a child subreaper, so every process the
// command starts stays its descendant, even one that left the group (a
// daemon calling setsid) or whose parent exited; elsewhere the command's
// process group is killed, and processes that left it are out of reach.
func supervise(args []string) int {
	if len(args) < 3 || !isPipe(controlFD) {
		fmt.Fprintf(os.Stderr, "dlock: %s is started by dlock run, not by hand\n", superviseArg)
		return exitUsage
	}
	syscall.CloseOnExec(controlFD) // the command must not hold it
	becomeSubreaper()
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwardedSignals...)...)

	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr) // should the supervisor itself be killed
	if args[0] == "tty" {
		attr.Foreground, attr.Ctty = true, 0
	}
	pid, err := syscall.ForkExec(args[1], args[2:], &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   attr,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock run: cannot run the command: %v\n", err)
		if errors.Is(err, syscall.ENOENT) {
			return exitNotFound
		}
		return exitCannotExec
	}
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.NewFile(controlFD, "dlock run"))
		close(closed)
	}()
	return superviseTree(pid, sigs, closed)
}

// superviseTree waits for the command (pid, leader of its own process
// group) and its descendants, as described at supervise, and returns the
// command's status. It is the only caller of wait: a child it has not
// reaped keeps its pid, so the pid it signals is never another process's.
func superviseTree(pid int, sigs <-chan os.Signal, closed <-chan struct{}) int {
	status := -1     // the command's, once reaped
	killing := false // everything left is to be killed
	for {
		for {
			var ws syscall.WaitStatus
			child, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil { // ECHILD: nothing of the command is left
				return max(status, 0)
			}
			if child == 0 {
				break
			}
			if child == pid {
				status, killing = shellStatus(ws), true
				killGroupAfterExit(pid)
			}
		}
		if killing {
			killChildren()
		}
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD && !killing {
				_ = syscall.Kill(-pid, sig.(syscall.Signal))
			}
		case <-closed:
			closed = nil
			if !killing { // not reaped: the group is still the command's
				killing = true
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
}

// shellStatus reports a wait status as a shell does: the exit code, or
// 128+N for death by signal N.
func shellStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}
