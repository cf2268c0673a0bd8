package main

import (
	"bytes"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"unsafe"
)

// selfExe is the path that starts dlock's own binary again: the running
// image, even if the file was replaced since (an upgrade).
func selfExe() (string, error) { return "/proc/self/exe", nil }

// dieWithParent makes the kernel SIGKILL the command if its supervisor dies
// without cleaning up.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// becomeSubreaper makes the orphans among this process's descendants its
// children instead of init's, so that none can get out of its reach. It
// fails only on kernels older than 3.4.
func becomeSubreaper() {
	const prSetChildSubreaper = 36
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// killChildren sends SIGKILL to every child of this process: the
// supervisor, a subreaper, kills its whole tree by repeating this as each
// killed child hands its own children over. It reads all of /proc:
// /proc/PID/task/TID/children needs a kernel option that some kernels
// lack.
func killChildren() {
	entries, _ := os.ReadDir("/proc")
	me := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && parentOf(pid) == me {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// parentOf returns the parent pid of pid, or -1 if it is gone.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	// pid (comm) state ppid ...; comm may contain anything, ")" too.
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return -1
	}
	return ppid
}

// killGroupAfterExit has nothing to do on Linux: what the command left
// running is handed to the subreaper, which kills it with killChildren.
func killGroupAfterExit(int) {}

// foregroundTTY returns the descriptor of in if it is a terminal whose
// foreground process group is dlock's own (an interactive run), or -1.
func foregroundTTY(in io.Reader) int {
	f, ok := in.(*os.File)
	if !ok || f == nil {
		return -1
	}
	fd := int(f.Fd())
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return -1
	}
	if int(pgrp) != syscall.Getpgrp() {
		return -1
	}
	return fd
}

// restoreForeground gives the terminal back to dlock's process group after
// the command, which had it, ended. SIGTTOU is ignored meanwhile: a
// background group that changes the foreground group would get it.
func restoreForeground(fd int) {
	if fd < 0 {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}

// isTerminal reports whether w is a terminal (a tty that answers TCGETS).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	rc, err := f.SyscallConn() // unlike Fd, leaves the file's mode alone
	if err != nil {
		return false
	}
	var e syscall.Errno = 1
	rc.Control(func(fd uintptr) {
		var t syscall.Termios
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	})
	return e == 0
}
