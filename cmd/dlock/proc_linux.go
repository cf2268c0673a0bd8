package main

import (
	"io"
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// dieWithParent makes the kernel SIGKILL the command if dlock dies without
// cleaning up (SIGKILL, OOM killer): its lock would expire while it ran.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

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
