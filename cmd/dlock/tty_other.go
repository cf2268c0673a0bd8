//go:build !linux

package main

import "io"

// foregroundTTY is only implemented on Linux; elsewhere an interactive
// command runs in a background process group.
func foregroundTTY(io.Reader) int { return -1 }

func restoreForeground(int) {}
