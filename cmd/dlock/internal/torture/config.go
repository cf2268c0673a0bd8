package torture

import (
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Backends.
const (
	Redis    = "redis"
	Redlock  = "redlock"
	Postgres = "postgres"
	Etcd     = "etcd" // a throwaway 3-member cluster (Nodes members)
)

// Fault kinds. A schedule draws from the kinds a run enables (see
// Config.Faults); the control-only kinds serve negative controls.
const (
	FaultPause          = "pause"           // SIGSTOP a worker (the holder) beyond the TTL, then SIGCONT
	FaultRestart        = "restart"         // kill lock server(s), restart empty at once
	FaultRestartDelayed = "restart-delayed" // kill lock server(s), restart empty after the TTL
	FaultMajority       = "majority"        // Redlock: kill a majority, restart at once
	FaultLatency        = "latency"         // delay a worker's replies from lock servers
	FaultBlackhole      = "blackhole"       // a worker's links to lock servers go silent
	FaultCut            = "cut"             // a worker's connections to lock servers are dropped
	FaultTerminate      = "terminate"       // PostgreSQL: pg_terminate_backend of the holder
	FaultKill           = "kill"            // SIGKILL the holder (a worker), and start it again

	// FaultRewind takes the server back to its state just before the last
	// grant, as a failover to a replica that missed it would: the lock key
	// is gone and the fence counter one lower, so the next holder gets the
	// fence of the one still holding (with the counters first moved ahead
	// of the server clock, without which fences cannot repeat). Single
	// Redis node only.
	FaultRewind = "rewind"
	// FaultFastClock cuts every grant's TTL on the server by the drift
	// factor's share of the TTL, standing in for a server clock that runs
	// that much faster than the client's: the case the drift margin is
	// for, at the edge of what it allows. Single Redis node only.
	FaultFastClock = "fastclock"
)

// Negative controls: workers or backends broken on purpose, which the
// checker must report unsafe.
const (
	ControlPlainDel = "plaindel" // release with a plain DEL
	ControlNoFence  = "nofence"  // write the register without a guard
	ControlGTE      = "gte"      // a guard that accepts fence >= highest from anyone
	ControlQuorum   = "quorum"   // Redlock with a quorum of N/2
	ControlNoDrift  = "nodrift"  // validity without the drift margin
	// ControlSemCount is a semaphore on Redlock that counts holders on
	// each node and holds a permit with a majority of nodes' counts,
	// whatever slot: it admits more than Limit (3 nodes, limit 2:
	// holders granted on nodes {1,2}, {2,3} and {3,1}).
	ControlSemCount = "semcount"
)

// Controls lists the negative controls.
var Controls = []string{ControlPlainDel, ControlNoFence, ControlGTE, ControlQuorum, ControlNoDrift, ControlSemCount}

// Config describes one run. The zero value of each field means its default.
type Config struct {
	// Backend is Redis, Redlock or Postgres. The default is Redis, or what
	// the servers given imply (several RedisURLs: Redlock).
	Backend string
	// RedisURLs and PostgresDSN name the user's own lock servers. Empty:
	// throwaway local servers (redis-server, PostgreSQL) are started.
	RedisURLs   []string
	PostgresDSN string
	// ServerFaults allows server faults on the user's servers: a restart
	// is then emulated by deleting this run's keys there (the server is
	// not touched otherwise), and PostgreSQL backends of this run are
	// terminated. Without it a run on the user's servers injects client
	// faults only (pauses, the proxy).
	ServerFaults bool
	// Nodes is the number of throwaway Redlock servers (default 5).
	Nodes int

	Workers int // worker processes (default 4; with Election, candidates, default 3)
	Keys    int // lock keys the workers pick from (default 1)
	// Limit, when above 0, makes each key a semaphore of Limit permits
	// (dlock.Semaphore): the workers take permits, the oracle checks that
	// at most Limit are inside at every instant, and each permit writes
	// the register of its slot. It must be below Workers.
	Limit    int
	TTL      time.Duration // lock TTL (default 500ms)
	Hold     time.Duration // the longest hold of one critical section (default TTL)
	Duration time.Duration // how long workers take locks (default 20s)
	Seed     int64         // the schedule and the workers' choices derive from it

	// Election runs the election scenario: the workers are candidates
	// that lead each key with dlock.Lead (a term is a critical section,
	// resigned when it ends) and rest at times between terms, and
	// Observers more processes follow each key's leader with
	// dlock.Observe. The checker adds the observers' checks and measures
	// the hand-offs.
	Election  bool
	Observers int // with Election: observer processes (default 2)

	// Faults are the fault kinds to inject; nil means the defaults for the
	// backend (DefaultFaults), an empty non-nil slice none.
	Faults []string
	// Control is a negative control to run (one of Controls), with its own
	// schedule; "" runs the real thing.
	Control string
	// ControlOff runs Control's schedule with its flaw switched off: the
	// same workload and faults, which the real code must pass.
	ControlOff bool

	// Timeline, when set, is where the timeline picture is written (SVG,
	// or HTML embedding it when the name ends in .html).
	Timeline string

	// Worker returns the command that starts one worker process: a
	// program that calls WorkerMain. Required.
	Worker func() *exec.Cmd
	// Log receives progress lines and the fault log as they happen.
	Log io.Writer
}

// DefaultFaults returns the faults a run injects unless told otherwise:
// every fault that can be injected into the backend and the servers the
// run has control of.
func DefaultFaults(backend string, ownServers bool) []string {
	f := []string{FaultPause, FaultLatency, FaultBlackhole, FaultCut, FaultKill}
	if !ownServers {
		return f
	}
	f = append(f, FaultRestart, FaultRestartDelayed)
	if backend == Etcd {
		f = append(f, FaultMajority) // the cluster stops granting; no lock may be lost
	}
	if backend == Postgres {
		f = append(f, FaultTerminate)
	}
	return f
}

// AllFaults lists every fault kind, for help texts.
var AllFaults = []string{FaultPause, FaultKill, FaultRestart, FaultRestartDelayed, FaultMajority, FaultLatency,
	FaultBlackhole, FaultCut, FaultTerminate, FaultRewind, FaultFastClock}

// ownServers reports whether the run starts its own lock servers.
func (c *Config) ownServers() bool { return len(c.RedisURLs) == 0 && c.PostgresDSN == "" }

// serverControl reports whether the run may inject server faults.
func (c *Config) serverControl() bool { return c.ownServers() || c.ServerFaults }

// withDefaults fills in defaults and rejects what cannot run, with an error
// matching dlock.ErrInvalid.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Backend == "" && c.PostgresDSN != "":
		c.Backend = Postgres
	case c.Backend == "" && len(c.RedisURLs) > 1:
		c.Backend = Redlock
	case c.Backend == "" && (c.Control == ControlQuorum || c.Control == ControlSemCount):
		c.Backend = Redlock
	case c.Backend == "":
		c.Backend = Redis
	}
	if c.Worker == nil {
		return c, bridge.Invalidf("torture: no worker command")
	}
	if c.Control != "" {
		if !slices.Contains(Controls, c.Control) {
			return c, bridge.Invalidf("torture: control %q: want one of %s", c.Control, strings.Join(Controls, ", "))
		}
		if err := c.controlDefaults(); err != nil {
			return c, err
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Workers == 0 && c.Election {
		c.Workers = 3
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Observers == 0 && c.Election {
		c.Observers = 2
	}
	if c.Keys == 0 {
		c.Keys = 1
	}
	if c.TTL == 0 && c.Backend == Etcd {
		c.TTL = time.Second // etcd's shortest lease: the lease is the TTL
	}
	if c.TTL == 0 {
		c.TTL = 500 * time.Millisecond
	}
	if c.Hold == 0 {
		c.Hold = c.TTL
	}
	if c.Duration == 0 {
		c.Duration = 20 * time.Second
	}
	if c.Nodes == 0 && c.Backend == Etcd {
		c.Nodes = 3
	}
	if c.Nodes == 0 {
		c.Nodes = 5
	}
	switch {
	case c.Backend != Redis && c.Backend != Redlock && c.Backend != Postgres && c.Backend != Etcd:
		return c, bridge.Invalidf("torture: backend %q: want redis, redlock, postgres or etcd", c.Backend)
	case c.Backend == Etcd && (len(c.RedisURLs) > 0 || c.PostgresDSN != ""):
		return c, bridge.Invalidf("torture: backend etcd runs on a throwaway cluster of its own, not on --redis or --postgres servers")
	case c.Backend == Postgres && len(c.RedisURLs) > 0:
		return c, bridge.Invalidf("torture: backend postgres with --redis servers")
	case c.Backend != Postgres && c.PostgresDSN != "":
		return c, bridge.Invalidf("torture: backend %s with a PostgreSQL DSN", c.Backend)
	case c.Backend == Redis && len(c.RedisURLs) > 1:
		return c, bridge.Invalidf("torture: backend redis takes one server, got %d (several: redlock)", len(c.RedisURLs))
	case c.Backend == Redlock && len(c.RedisURLs) == 1:
		return c, bridge.Invalidf("torture: backend redlock needs several servers, got one")
	case c.Workers < 2 || c.Workers > 64:
		return c, bridge.Invalidf("torture: %d workers: want 2 to 64", c.Workers)
	case c.Observers < 0 || c.Observers > 16 || c.Observers > 0 && !c.Election:
		return c, bridge.Invalidf("torture: %d observers: want 0 to 16, with the election scenario", c.Observers)
	case c.Election && c.Control != "":
		return c, bridge.Invalidf("torture: the negative controls run the lock scenario, not the election")
	case c.Keys < 1 || c.Keys > 100:
		return c, bridge.Invalidf("torture: %d keys: want 1 to 100", c.Keys)
	case c.Limit < 0 || c.Limit > 0 && c.Limit >= c.Workers:
		return c, bridge.Invalidf("torture: limit %d: want 0 (locks) or a semaphore of fewer permits than the %d workers", c.Limit, c.Workers)
	case c.Nodes < 1 || c.Nodes > 15:
		return c, bridge.Invalidf("torture: %d nodes: want 1 to 15", c.Nodes)
	case c.TTL < 50*time.Millisecond:
		return c, bridge.Invalidf("torture: ttl %v: want at least 50ms (shorter TTLs measure the machine's scheduling, not the lock)", c.TTL)
	case c.Hold < 0:
		return c, bridge.Invalidf("torture: hold %v: must not be negative", c.Hold)
	case c.Duration < time.Second:
		return c, bridge.Invalidf("torture: duration %v: want at least 1s", c.Duration)
	}
	if c.Backend == Redlock && len(c.RedisURLs) > 0 {
		c.Nodes = len(c.RedisURLs)
	}
	if c.Faults == nil {
		c.Faults = DefaultFaults(c.Backend, c.serverControl())
	}
	for _, f := range c.Faults {
		if err := c.checkFault(f); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Config) checkFault(f string) error {
	if !slices.Contains(AllFaults, f) {
		return bridge.Invalidf("torture: fault %q: want one of %s", f, strings.Join(AllFaults, ", "))
	}
	server := f == FaultRestart || f == FaultRestartDelayed || f == FaultMajority || f == FaultTerminate || f == FaultRewind || f == FaultFastClock
	switch {
	case server && !c.serverControl():
		return bridge.Invalidf("torture: fault %q needs control of the servers: on your own servers pass --server-faults", f)
	case f == FaultMajority && c.Backend != Redlock && c.Backend != Etcd:
		return bridge.Invalidf("torture: fault %q is for redlock and etcd", f)
	case f == FaultTerminate && c.Backend != Postgres:
		return bridge.Invalidf("torture: fault %q is for postgres", f)
	case (f == FaultRewind || f == FaultFastClock) && c.Backend != Redis:
		return bridge.Invalidf("torture: fault %q is for a single redis node", f)
	}
	return nil
}

// controlDefaults gives a negative control the backend and schedule it
// needs to show its flaw; the flags the user set explicitly win where
// they can.
func (c *Config) controlDefaults() error {
	need := map[string]string{ControlQuorum: Redlock, ControlNoDrift: Redis, ControlGTE: Redis, ControlSemCount: Redlock}
	if b, ok := need[c.Control]; ok && c.Backend != b {
		return bridge.Invalidf("torture: control %q runs on %s, not %s", c.Control, b, c.Backend)
	}
	if (c.Control == ControlPlainDel) && (c.Backend == Postgres || c.Backend == Etcd) {
		return bridge.Invalidf("torture: control %q is for the Redis backends", c.Control)
	}
	// Short runs with a short TTL show each flaw within seconds. The
	// drift control's holders ride their locks to the end, so it has
	// fewer, longer sections; see controlDriftFactor. A split vote needs
	// two attempts on a free key at once, which orderly hand-offs (the
	// release wakes one waiter) do not make: the quorum control's come
	// from a paused holder's lock expiring under its polling waiters. With
	// no faults it was caught in 15 of 20 runs, in 2s with pauses in 18,
	// in 4s with pauses in 20.
	ttl, d, faults := 200*time.Millisecond, 2*time.Second, []string{FaultPause}
	switch c.Control {
	case ControlGTE:
		faults = []string{FaultRewind}
	case ControlQuorum:
		d = 4 * time.Second
	case ControlNoDrift:
		ttl, d, faults = 400*time.Millisecond, 3*time.Second, []string{FaultFastClock}
	case ControlSemCount:
		// Three nodes, two permits, six workers racing for them on
		// links that lag now and then: attempts reach the nodes in
		// different orders.
		d, faults = 4*time.Second, []string{FaultLatency}
		if c.Nodes == 0 {
			c.Nodes = 3
		}
		if c.Limit == 0 {
			c.Limit = 2
		}
		if c.Workers == 0 {
			c.Workers = 6
		}
	}
	if c.TTL == 0 {
		c.TTL = ttl
	}
	if c.Duration == 0 {
		c.Duration = d
	}
	if c.Faults == nil {
		c.Faults = faults
	}
	return nil
}

// controlDriftFactor is the drift factor of the no-drift control's
// Lockers, and how much faster than theirs its fast clock runs. The
// control's holders exit 15ms (edge) before their validity ends: with the
// margin (factor × TTL + 2ms) the next holder is granted the lock 17ms
// after that; without it, factor × TTL - 15ms before. A scheduling delay
// of the holder's exit longer than 17ms makes the real code look unsafe,
// one shorter than the window makes the broken code look safe; at 10% of
// a 400ms TTL (40ms) both sides have room on a loaded two-core machine.
// (At 5% and a 5ms edge the real code was reported unsafe twice.)
const controlDriftFactor = 0.10

// driftFactor is the drift factor the workers' Lockers use.
func (c *Config) driftFactor() float64 {
	if c.Control == ControlNoDrift {
		return controlDriftFactor
	}
	return bridge.DefaultDriftFactor
}

func (c *Config) String() string {
	s := fmt.Sprintf("backend %s, %d workers, %d key(s), ttl %v, hold up to %v, %v, seed %d",
		c.Backend, c.Workers, c.Keys, c.TTL, c.Hold, c.Duration, c.Seed)
	if c.Election {
		s = fmt.Sprintf("election on %s, %d candidates, %d observers, %d key(s), ttl %v, terms up to %v, %v, seed %d",
			c.Backend, c.Workers, c.Observers, c.Keys, c.TTL, c.Hold, c.Duration, c.Seed)
	}
	if c.Limit > 0 {
		s = fmt.Sprintf("backend %s, %d workers, %d semaphore(s) of %d permits, ttl %v, hold up to %v, %v, seed %d",
			c.Backend, c.Workers, c.Keys, c.Limit, c.TTL, c.Hold, c.Duration, c.Seed)
	}
	switch {
	case c.Control != "" && c.ControlOff:
		s += ", the schedule of negative control " + c.Control + " with its flaw off"
	case c.Control != "":
		s += ", negative control " + c.Control
	}
	return s
}
