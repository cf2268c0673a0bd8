//go:build !linux

package main

import (
	"io"
	"syscall"
)

// dieWithParent has no portable equivalent outside Linux.
func dieWithParent(*syscall.SysProcAttr) {}

// foregroundTTY is only implemented on Linux; elsewhere an interactive
// command runs in a background process group.
func foregroundTTY(io.Reader) int { return -1 }

func restoreForeground(int) {}
