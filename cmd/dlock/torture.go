package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/torture"
)

// tortureWorkerCmd is the hidden mode in which dlock torture re-executes
// the dlock binary as one of its worker processes.
const tortureWorkerCmd = "torture-worker"

func (a *app) tortureCmd() *cobra.Command {
	var cfg torture.Config
	var faults string
	cmd := &cobra.Command{
		Use:   "torture [flags]",
		Short: "Run competing processes through faults and check that the lock and its fences held",
		Long: `Torture starts worker processes that take the same lock(s) again and again
through the chosen backend, with dlock.Do, while it injects faults: it pauses
the holder (SIGSTOP) beyond the TTL, kills lock servers and restarts them
empty (at once, or after the TTL), loses a Redlock majority, delays replies,
silences and drops connections through a TCP proxy in front of every server,
and terminates a PostgreSQL holder's backend. With --backend etcd it starts a
throwaway 3-member etcd cluster (the etcd binary on PATH; --nodes changes the
size) and kills and restarts members (keeping their data), a minority or a
majority; a lock must survive both, since grants wait for a quorum.

Inside the critical section each worker records its entry and exit with an
oracle (a Redis server no fault touches) and reads and writes a register
through dlock's fence guard (fence/redisfence; fence/pgfence in a PostgreSQL
database of its own for postgres). At the end a checker prints a verdict with
its counts: sections completed; overlaps, each explained by an injected fault
or not; fenced writes accepted below a higher fence and fences accepted from
two tokens (both must be 0); stale writes rejected; losses signalled to Do;
errors by sentinel; the longest wait with the lock free; locks left on the
servers; and whether the register's history is linearizable (porcupine).

With --limit N each key is a semaphore of N permits (dlock.Semaphore): the
oracle keeps the set of holders inside, and the checker requires that no
worker enters while N or more are inside (a holder paused past its validity
excepted, whose fenced writes must then be refused); each permit reads and
writes the register of its slot. Add the fault kill (SIGKILL the holder, not
restarted) to see a dead holder's permit come back: the longest wait with
fewer than N held beyond the faults (from a TTL after a kill) says how long it
took.

Without --redis or --postgres it starts its own throwaway servers (redis-server
and PostgreSQL found on the machine), so it runs with no arguments. On your own
servers it injects client faults only (pauses, the proxy) unless you pass
--server-faults: a "restart" then deletes this run's keys on your server and
"terminate" ends this run's PostgreSQL sessions; nothing else is touched.

The fault schedule derives from --seed (printed at the start, with each fault
as it is injected): the same seed gives the same faults at the same times.
--control runs a negative control, a deliberately broken worker or backend that
the checker must report unsafe: plaindel (release by plain DEL), nofence (no
guard), gte (a guard accepting fence >= highest from anyone), quorum (Redlock
with a quorum of N/2), nodrift (validity without the drift margin), semcount (a
Redlock semaphore of 2 on 3 nodes that counts holders per node: it admits
holders granted on nodes {1,2}, {2,3} and {3,1} at once).

With --elect it runs an election instead: the workers are candidates that lead
the key with dlock.Lead (a term is a critical section, resigned at its end, and
they rest at times between terms), and --observers more processes follow the
leader with dlock.Observe. The verdict adds what the observers reported, checked
against the terms: never a lower term after a higher one, no leader named after
its term ended (beyond a TTL's linger), nobody named at the end of every stretch
in which nobody led, each term under its leader's identity; and the hand-off
times, after a resignation and after a SIGKILL of the leader.

Faults: ` + strings.Join(torture.AllFaults, ", ") + `.
Defaults: pause, kill (SIGKILL the holder, then start it again), latency,
blackhole, cut, and on servers it controls restart,
restart-delayed (and terminate for postgres, majority for etcd); majority, rewind and fastclock
only when asked for.

torture exits 0 when the verdict is SAFE (every must-be-zero count is 0 and
every overlap is explained) and 1 when it is UNSAFE (as a negative control must
be), 64 for bad flags and 69 when a server cannot be reached or started.

` + exitCodesHelp,
		Example: `  dlock torture
  dlock torture --backend redlock --faults majority --duration 1m
  dlock torture --backend postgres --seed 7 --timeline run.svg
  dlock torture --backend etcd --duration 1m
  dlock torture --elect --backend postgres
  dlock torture --redis redis://127.0.0.1:6379 --workers 8
  dlock torture --limit 3 --workers 8 --faults pause,kill,restart
  dlock torture --control quorum`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected arguments %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.redisURLs(cfg.RedisURLs); err != nil {
				return err
			}
			a.redact.addDSN(cfg.PostgresDSN)
			if cmd.Flags().Changed("faults") {
				cfg.Faults = []string{}
				if faults != "none" {
					for _, f := range strings.Split(faults, ",") {
						if f = strings.TrimSpace(f); f != "" {
							cfg.Faults = append(cfg.Faults, f)
						}
					}
				}
			}
			if !cmd.Flags().Changed("seed") {
				cfg.Seed = rand.Int64N(1 << 31)
			}
			self, err := os.Executable()
			if err != nil {
				return exitf(exitFailure, "torture: cannot find the dlock binary to run workers: %v", err)
			}
			cfg.Worker = func() *exec.Cmd { return exec.Command(self, tortureWorkerCmd) }
			cfg.Log = a.stdout

			ctx, interrupted, stop := interruptible(cmd.Context())
			defer stop()
			r, err := torture.Run(ctx, cfg)
			if sig := interrupted(); sig != nil {
				return exitf(signalCode(sig), "torture interrupted by %v", sig)
			}
			if r != nil {
				r.Print(a.stdout)
				if cfg.Timeline != "" && err == nil {
					fmt.Fprintf(a.stdout, "timeline: %s\n", cfg.Timeline)
				}
			}
			switch {
			case errors.Is(err, dlock.ErrInvalid):
				return &usageError{err: err}
			case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.ErrMisconfigured):
				return exitf(backendCode(err), "%v", err)
			case err != nil:
				return exitf(exitFailure, "%v", err)
			case !r.Safe():
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Backend, "backend", "", "redis, redlock, postgres or etcd (default: redis, or what --redis/--postgres imply)")
	f.StringArrayVar(&cfg.RedisURLs, "redis", nil, "your Redis `URL` to run on instead of throwaway servers; repeat it for Redlock")
	f.StringVar(&cfg.PostgresDSN, "postgres", "", "your PostgreSQL `DSN` to run on (it needs dlock's fence sequence)")
	f.BoolVar(&cfg.ServerFaults, "server-faults", false, "allow server faults on your servers (deleting this run's keys, ending its sessions)")
	f.IntVar(&cfg.Nodes, "nodes", 0, "Redlock: how many throwaway servers (default 5); etcd: how many members (default 3)")
	f.IntVar(&cfg.Workers, "workers", 0, "worker processes (default 4; with --elect the candidates, default 3)")
	f.IntVar(&cfg.Keys, "keys", 0, "lock keys the workers choose from (default 1)")
	f.IntVar(&cfg.Limit, "limit", 0, "make each key a semaphore of `N` permits (fewer than --workers)")
	f.DurationVar(&cfg.TTL, "ttl", 0, "lock TTL (default 500ms; a negative control's own)")
	f.DurationVar(&cfg.Hold, "hold", 0, "longest hold of one critical section (default: the TTL)")
	f.DurationVar(&cfg.Duration, "duration", 0, "how long the workers run (default 20s; a few seconds for a negative control)")
	f.Int64Var(&cfg.Seed, "seed", 0, "seed of the fault schedule and the workers' choices (default: random, printed)")
	f.StringVar(&faults, "faults", "", "comma-separated fault `kinds`, or none (default: see above)")
	f.StringVar(&cfg.Control, "control", "", "run a negative control: "+strings.Join(torture.Controls, ", "))
	f.StringVar(&cfg.Timeline, "timeline", "", "write the timeline picture to `FILE` (.svg, or .html)")
	f.BoolVar(&cfg.Election, "elect", false, "the election scenario: the workers are candidates (dlock.Lead), observers follow\nthe leader (dlock.Observe)")
	f.IntVar(&cfg.Observers, "observers", 0, "with --elect: observer processes (default 2)")
	return cmd
}

func (a *app) tortureWorker() *cobra.Command {
	return &cobra.Command{
		Use:    tortureWorkerCmd,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := torture.WorkerMain(a.stdin, a.stdout, a.stderr); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}
