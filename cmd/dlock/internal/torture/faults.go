package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// plannedFault is one entry of the schedule, drawn from the seed before
// the run starts. Who it hits is decided when it fires: the worker inside
// the critical section then (the holder), or Worker when nobody is.
type plannedFault struct {
	At      time.Duration // from the start of the run
	Kind    string
	For     time.Duration // how long it lasts (0: instantaneous)
	Latency time.Duration // FaultLatency
	Nodes   []int         // lock servers it concerns
	Worker  int           // the worker hit when nobody holds a lock
	Keys    []int         // the order in which keys are searched for a holder
}

// Fault is what happened: a fault as injected, for the log, the checker
// and the timeline.
type Fault struct {
	Kind   string
	Start  int64 // wall clock, ns
	End    int64 // when it was healed (== Start for instantaneous ones)
	Worker int   // the worker it hit, -1 for server faults
	Nodes  []int // the lock servers it concerns
	Detail string
}

func (f Fault) String() string {
	return f.Kind + " " + f.Detail
}

// server reports whether the fault hit servers (and so can lose a lock).
func (f Fault) server() bool {
	switch f.Kind {
	case FaultRestart, FaultRestartDelayed, FaultMajority, FaultTerminate, FaultRewind:
		return true
	}
	return false
}

// network reports whether the fault hit one worker's links.
func (f Fault) network() bool {
	switch f.Kind {
	case FaultLatency, FaultBlackhole, FaultCut:
		return true
	}
	return false
}

// faultWindow bounds the part of a run that gets faults: none in the first
// two TTLs (everyone gets going) and none in the last two TTLs or tenth of
// the run, so the run ends with locks changing hands normally and every
// lock released.
func faultWindow(cfg *Config) (from, to time.Duration) {
	return 2 * cfg.TTL, cfg.Duration - max(2*cfg.TTL, cfg.Duration/10)
}

// plan draws the fault schedule from the seed: one fault at a time, each
// followed by a gap of one to three TTLs of normal operation.
func plan(cfg *Config) []plannedFault {
	if len(cfg.Faults) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x70727475))
	ttl := cfg.TTL
	between := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(ttl))
	}
	n := 1
	if cfg.Backend == Redlock || cfg.Backend == Etcd {
		n = cfg.Nodes
	}
	minority := func() []int {
		k := 1 + rng.IntN(max((n-1)/2, 1))
		return rng.Perm(n)[:k]
	}
	var kinds []string // fastclock is not an event: it lasts the whole run
	for _, k := range cfg.Faults {
		if k != FaultFastClock {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	var out []plannedFault
	from, to := faultWindow(cfg)
	for t := from; t < to; {
		f := plannedFault{At: t, Kind: kinds[rng.IntN(len(kinds))], Worker: rng.IntN(cfg.Workers), Keys: rng.Perm(cfg.Keys)}
		switch f.Kind {
		case FaultPause:
			f.For = between(1.5, 3)
		case FaultRestart:
			f.Nodes = minority()
		case FaultRestartDelayed:
			f.Nodes = minority()
			f.For = between(1.2, 1.5)
		case FaultMajority:
			f.Nodes = rng.Perm(n)[:n/2+1]
		case FaultLatency:
			f.For, f.Latency = between(1, 4), between(0.05, 0.4)
		case FaultBlackhole:
			f.For = between(0.5, 2.5)
		}
		if f.network() {
			f.Nodes = allNodes(n)
			if n > 1 && rng.IntN(2) == 0 {
				f.Nodes = minority()
			}
		}
		slices.Sort(f.Nodes)
		out = append(out, f)
		t += f.For + between(1, 3)
	}
	return out
}

func (f plannedFault) network() bool { return Fault{Kind: f.Kind}.network() }

func allNodes(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// injector carries out a schedule.
type injector struct {
	cfg     *Config
	c       *cluster
	workers []*workerProc // by id: the processes running now
	all     []*workerProc // every process started, in order
	// startWorker starts worker i (again, after a kill).
	startWorker func(i int) error
	start       time.Time
	logf        func(format string, args ...any)
	faults      []Fault

	fastDone chan struct{} // closed when the fast clock stopped; nil if none
}

// prepare sets up what lasts the whole run, before the workers start:
// fence counters ahead of the clock for rewinds, and the fast clock, which
// runs until ctx ends.
func (in *injector) prepare(ctx context.Context) {
	if slices.Contains(in.cfg.Faults, FaultRewind) {
		err := in.c.aheadOfClock(ctx)
		in.record(Fault{Kind: "setup", Start: now(), Worker: -1, Nodes: []int{0},
			Detail: "fence counters moved ahead of the server clock, so that a rewind repeats a fence" + errNote(err)})
	}
	if slices.Contains(in.cfg.Faults, FaultFastClock) {
		f := in.cfg.driftFactor()
		cut := time.Duration(float64(in.cfg.TTL) * f)
		in.record(Fault{Kind: FaultFastClock, Start: now(), Worker: -1, Nodes: []int{0},
			Detail: fmt.Sprintf("every grant's TTL cut by %v on the server (a server clock %g%% fast, the drift factor)", cut, 100*f)})
		in.fastDone = make(chan struct{})
		go func() {
			defer close(in.fastDone)
			in.c.fastClock(ctx, cut)
		}()
	}
}

func (in *injector) run(ctx context.Context, schedule []plannedFault) {
	for _, f := range schedule {
		if !sleepUntil(ctx, in.start.Add(f.At)) {
			return
		}
		in.inject(ctx, f)
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

func (in *injector) record(f Fault) {
	if f.End == 0 {
		f.End = f.Start
	}
	in.faults = append(in.faults, f)
	at := time.Duration(f.Start - in.start.UnixNano()).Truncate(time.Millisecond)
	in.logf("  %7v  %s\n", at, f)
}

func nodeList(nodes []int) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = strconv.Itoa(n + 1)
	}
	return strings.Join(s, ",")
}

func (in *injector) inject(ctx context.Context, p plannedFault) {
	f := Fault{Kind: p.Kind, Worker: -1, Nodes: p.Nodes}
	target := func() string {
		// A fault on a worker is aimed at the holder: wait a little for
		// one if the lock is between holders.
		w := in.c.holder(ctx, p.Keys)
		for wait := time.Now().Add(in.cfg.TTL); w < 0 && time.Now().Before(wait) && ctx.Err() == nil; {
			time.Sleep(5 * time.Millisecond)
			w = in.c.holder(ctx, p.Keys)
		}
		who := "holder"
		if w < 0 {
			w, who = p.Worker, "idle"
		}
		f.Worker = w
		return fmt.Sprintf("worker %d (%s)", w, who)
	}
	servers := "server"
	if len(in.c.locks) > 1 {
		servers = "node(s) " + nodeList(p.Nodes)
	}
	f.Start = now()
	switch p.Kind {
	case FaultPause:
		who := target()
		proc := in.workers[f.Worker]
		proc.signal(syscall.SIGSTOP)
		sleepCtx(context.WithoutCancel(ctx), p.For)
		proc.signal(syscall.SIGCONT)
		f.Detail = fmt.Sprintf("%s stopped for %v", who, p.For.Round(time.Millisecond))
	case FaultRestart, FaultMajority:
		err := in.c.kill(ctx, p.Nodes)
		err2 := in.c.restart(p.Nodes)
		f.Detail = fmt.Sprintf("%s killed and restarted empty at once%s", servers, errNote(err, err2))
		if in.c.etcd != nil {
			f.Detail = fmt.Sprintf("etcd member(s) %s killed and restarted at once (with their data)%s", nodeList(p.Nodes), errNote(err, err2))
		} else if in.c.locks[0].redis == nil && in.c.locks[0].pg == nil {
			f.Detail = fmt.Sprintf("%s: this run's keys deleted (your server is not killed)%s", servers, errNote(err, err2))
		}
	case FaultRestartDelayed:
		err := in.c.kill(ctx, p.Nodes)
		sleepCtx(context.WithoutCancel(ctx), p.For)
		err2 := in.c.restart(p.Nodes)
		f.Detail = fmt.Sprintf("%s killed, restarted empty %v later%s", servers, p.For.Round(time.Millisecond), errNote(err, err2))
		if in.c.etcd != nil {
			f.Detail = fmt.Sprintf("etcd member(s) %s killed, restarted %v later (with their data)%s", nodeList(p.Nodes), p.For.Round(time.Millisecond), errNote(err, err2))
		}
	case FaultKill:
		who := target()
		f.Start = now() // the kill, not the search for the holder
		proc := in.workers[f.Worker]
		proc.killed = true
		proc.signal(syscall.SIGCONT)
		proc.signal(syscall.SIGKILL)
		<-proc.exited
		err := in.c.forgetWorker(context.WithoutCancel(ctx), f.Worker) // its inside markers
		err2 := in.startWorker(f.Worker)
		f.Detail = fmt.Sprintf("%s killed (SIGKILL) and started again%s", who, errNote(err, err2))
	case FaultTerminate:
		pids, err := in.c.terminate(ctx, false)
		f.Detail = fmt.Sprintf("pg_terminate_backend of the holder's backend, pid %v%s", pids, errNote(err))
		if len(pids) == 0 && err == nil {
			f.Detail = "pg_terminate_backend: no backend held a lock"
		}
	case FaultRewind:
		target() // while a lock is held: the next grant repeats its fence
		key := p.Keys[0]
		rewound, err := in.c.rewind(ctx, in.c.keys[key])
		f.Detail = fmt.Sprintf("server back to before the last grant of %s (lock key gone, fence counter one lower): the next holder gets the same fence%s", in.c.keys[key], errNote(err))
		if !rewound && err == nil {
			f.Detail = fmt.Sprintf("%s: nobody held it, or its counter is not ahead of the clock: nothing rewound", in.c.keys[key])
		}
	case FaultLatency, FaultBlackhole, FaultCut:
		who := target()
		ps := in.c.proxies[f.Worker]
		for _, n := range p.Nodes {
			switch p.Kind {
			case FaultLatency:
				ps[n].SetLatency(p.Latency)
			case FaultBlackhole:
				ps[n].Blackhole(true)
			case FaultCut:
				ps[n].Reset()
			}
		}
		sleepCtx(context.WithoutCancel(ctx), p.For)
		for _, n := range p.Nodes {
			ps[n].SetLatency(0)
			ps[n].Blackhole(false)
		}
		links := "its links"
		if len(in.c.locks) > 1 {
			links = "its links to node(s) " + nodeList(p.Nodes)
		}
		switch p.Kind {
		case FaultLatency:
			f.Detail = fmt.Sprintf("%s: %v on every reply over %s for %v", who, p.Latency.Round(time.Millisecond), links, p.For.Round(time.Millisecond))
		case FaultBlackhole:
			f.Detail = fmt.Sprintf("%s: %s silent for %v", who, links, p.For.Round(time.Millisecond))
		default:
			f.Detail = fmt.Sprintf("%s: connections over %s dropped", who, links)
		}
	}
	f.End = now()
	if f.server() {
		f.Worker = -1
	}
	in.record(f)
}

func errNote(errs ...error) string {
	var s []string
	for _, err := range errs {
		if err != nil {
			s = append(s, oneLine(err.Error()))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " (error: " + strings.Join(s, "; ") + ")"
}
