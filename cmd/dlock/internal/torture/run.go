package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// workerProc is one worker process as the parent sees it.
type workerProc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser

	ready chan struct{} // closed at its first event

	killed bool // by a kill fault

	mu     sync.Mutex
	events []Event
	stderr bytes.Buffer // the last few KB
	bad    int          // lines that were not events
	exited chan struct{}
	err    error // from Wait
}

func (p *workerProc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// tailWriter keeps the last few KB written to it.
type tailWriter struct{ p *workerProc }

func (t tailWriter) Write(b []byte) (int, error) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	t.p.stderr.Write(b)
	if n := t.p.stderr.Len(); n > 4096 {
		t.p.stderr.Next(n - 4096)
	}
	return len(b), nil
}

// Run runs the workers against the backend under the fault schedule of
// cfg, checks what they recorded, and returns the report. Progress and the
// fault log go to cfg.Log as the run goes. When ctx ends, Run stops the
// workers, removes what it started and returns an error matching ctx's
// error. Errors that stop a run from starting match dlock.ErrInvalid (the
// configuration) or dlock.ErrUnavailable (the servers).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, format, args...) }
	logf("dlock torture: %s\n", cfg.String())
	schedule := plan(&cfg)

	c, err := startCluster(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	logf("servers: %s\n", c.describe())

	in := &injector{cfg: &cfg, c: c, start: time.Now(), logf: logf}
	logf("faults (seed %d):\n", cfg.Seed)
	lasting, stopLasting := context.WithCancel(ctx)
	defer func() {
		stopLasting()
		if in.fastDone != nil {
			<-in.fastDone
		}
	}()
	in.prepare(lasting)

	// procs are the workers (candidates) and the observers by id; every
	// process started, killed ones included, is in in.all.
	procs := make([]*workerProc, cfg.Workers+cfg.Observers)
	defer func() {
		for _, p := range in.all {
			p.signal(syscall.SIGCONT)
			p.signal(syscall.SIGKILL)
			<-p.exited
		}
	}()
	in.startWorker = func(i int) error {
		p, err := startWorker(cfg.Worker(), i, c.workerConfig(i))
		if p != nil {
			procs[i] = p
			in.all = append(in.all, p)
		}
		return err
	}
	for i := range procs {
		if err := in.startWorker(i); err != nil {
			return nil, err
		}
	}

	// The run (and its schedule) starts when every worker is ready to go:
	// a loaded machine can take a while to start M processes.
	for _, p := range procs {
		select {
		case <-p.ready:
		case <-p.exited:
			p.mu.Lock()
			msg := oneLine(p.stderr.String())
			p.mu.Unlock()
			return nil, fmt.Errorf("torture: worker %d exited at start: %s", p.id, msg)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	start := time.Now()
	in.start, in.workers = start, procs
	if len(schedule) == 0 && len(cfg.Faults) == 0 {
		logf("  none\n")
	}
	runCtx, stopRun := context.WithDeadline(ctx, start.Add(cfg.Duration))
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		in.run(runCtx, schedule)
	}()
	<-runCtx.Done()
	stopRun()
	<-injected

	// Stop: every worker finishes the section it is in and exits.
	for _, p := range in.all {
		p.signal(syscall.SIGCONT)
		p.stdin.Close()
	}
	grace := time.NewTimer(4*cfg.TTL + 10*time.Second)
	defer grace.Stop()
	var hung []int
	for _, p := range in.all {
		select {
		case <-p.exited:
		case <-grace.C:
			hung = append(hung, p.id)
			p.signal(syscall.SIGKILL)
			<-p.exited
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A lock whose release was lost expires within its TTL; a PostgreSQL
	// backend ends a moment after its client.
	wait := cfg.TTL + 100*time.Millisecond
	if cfg.Backend == Postgres {
		wait += time.Second
	}
	if cfg.Backend == Etcd {
		wait += 2 * time.Second // leases count whole seconds, and expire at the leader's next check
	}
	left, leftErr := c.locksLeft(checkCtx, wait)

	var events []Event
	var problems []string
	for _, p := range in.all {
		p.mu.Lock()
		events = append(events, p.events...)
		if p.err != nil && !slices.Contains(hung, p.id) && !p.killed {
			problems = append(problems, fmt.Sprintf("worker %d exited with %v: %s", p.id, p.err, oneLine(p.stderr.String())))
		}
		if p.bad > 0 {
			problems = append(problems, fmt.Sprintf("worker %d wrote %d lines that are not events", p.id, p.bad))
		}
		p.mu.Unlock()
	}
	for _, id := range hung {
		problems = append(problems, fmt.Sprintf("worker %d did not stop within its grace period and was killed", id))
	}
	if leftErr != nil {
		problems = append(problems, fmt.Sprintf("counting the locks left on the servers: %v", leftErr))
	}
	r := check(&cfg, events, in.faults, in.start.UnixNano(), now())
	r.LocksLeft = left
	r.Problems = append(r.Problems, problems...)
	if cfg.Timeline != "" {
		if err := writeTimeline(cfg.Timeline, cfg.Workers, r); err != nil {
			return r, fmt.Errorf("torture: timeline: %w", err)
		}
	}
	return r, nil
}

func startWorker(cmd *exec.Cmd, id int, wc workerConfig) (*workerProc, error) {
	p := &workerProc{id: id, cmd: cmd, exited: make(chan struct{}), ready: make(chan struct{})}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = tailWriter{p}
	// Its own process group: a Ctrl-C reaches the parent only, which then
	// stops the workers in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("torture: start worker %d: %w", id, err)
	}
	p.stdin = stdin
	line, _ := json.Marshal(wc)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e Event
			err := json.Unmarshal(sc.Bytes(), &e)
			p.mu.Lock()
			switch {
			case err != nil || e.W != id:
				p.bad++
			case e.Ev == evReady:
				close(p.ready)
			default:
				p.events = append(p.events, e)
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		<-read // Wait closes the pipe: read everything first
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.exited)
	}()
	if _, err := stdin.Write(append(line, '\n')); err != nil && !errors.Is(err, syscall.EPIPE) {
		return p, fmt.Errorf("torture: configure worker %d: %w", id, err)
	}
	return p, nil
}

func (c *cluster) describe() string {
	var s string
	switch {
	case c.cfg.Backend == Postgres && c.locks[0].pg != nil:
		s = fmt.Sprintf("a throwaway PostgreSQL on %s", c.locks[0].addr)
	case c.cfg.Backend == Postgres:
		s = fmt.Sprintf("your PostgreSQL at %s", c.locks[0].addr)
	case c.etcd != nil:
		s = fmt.Sprintf("a throwaway %d-member etcd cluster on", len(c.locks))
		for _, ls := range c.locks {
			s += " " + ls.addr
		}
	case c.locks[0].redis != nil:
		s = fmt.Sprintf("%d throwaway redis-server(s) on", len(c.locks))
		for _, ls := range c.locks {
			s += " " + ls.addr
		}
	default:
		s = "your Redis server(s)"
		for _, ls := range c.locks {
			s += " " + ls.addr
		}
	}
	s += fmt.Sprintf("; oracle on %s", c.oracle.Addr)
	if c.guardPG != nil {
		s += fmt.Sprintf(", guard in PostgreSQL on port %d", c.guardPG.Port)
	} else {
		s += " (also the guard)"
	}
	return s + "; keys under " + c.prefix
}
