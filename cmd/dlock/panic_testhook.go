//go:build dlock_testpanic

package main

import (
	"os"
	"time"
)

// This file is compiled only into a test build of dlock (go build -tags
// dlock_testpanic): the dlock process panics, as a bug would, when the file
// named by DLOCK_TEST_PANIC_FILE appears. Its supervising process does not.
func init() {
	path := os.Getenv("DLOCK_TEST_PANIC_FILE")
	if path == "" || len(os.Args) > 1 && os.Args[1] == superviseArg {
		return
	}
	go func() {
		for {
			if _, err := os.Stat(path); err == nil {
				panic("dlock_testpanic: injected panic")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
}
