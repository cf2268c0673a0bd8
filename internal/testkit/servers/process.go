package servers

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a server process the harness started: Redis and Postgres
// share how it is tracked, signalled and awaited.
type process struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
}

// track records a started cmd and reaps it in the background; the returned
// channel is closed when it exits.
func (p *process) track(cmd *exec.Cmd) <-chan struct{} {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return exited
}

// exitedChan returns the current process's exit channel, nil if none was
// started.
func (p *process) exitedChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// signal sends sig to the process unless it has exited, and with wait
// waits for it to exit.
func (p *process) signal(sig syscall.Signal, wait bool) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(sig)
	if wait {
		<-exited
	}
}

var (
	errExited   = errors.New("exited")
	errNotReady = errors.New("not ready")
)

// waitReady polls ready every interval until it succeeds (nil), the process
// exits (errExited) or timeout passes (errNotReady).
func waitReady(exited <-chan struct{}, timeout, every time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errExited
		default:
		}
		if ready() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errNotReady
		}
		time.Sleep(every)
	}
}
