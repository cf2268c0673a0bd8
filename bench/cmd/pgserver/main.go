// Command pgserver starts a throwaway PostgreSQL cluster for bench/run.sh
// (through internal/testkit/testsrv, which runs initdb and postgres as the user
// postgres when started as root), prints its DSN on stdout, and stops and
// removes it when stdin closes or on SIGINT/SIGTERM.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

func main() {
	dir, err := os.MkdirTemp("", "dlock-bench-pg")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	p, err := testsrv.NewPostgres(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	defer p.Stop()
	fmt.Println(p.DSN())

	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
}
