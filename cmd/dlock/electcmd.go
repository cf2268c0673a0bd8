package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// election is what makes a runner dlock elect's: the candidate's identity
// ("" for the library's default, host:pid) and whether it campaigns again
// after a loss.
type election struct {
	id         string
	recampaign bool
}

// options are dlock.Lead's options for e.
func (e *election) options() []dlock.Option {
	opts := []dlock.Option{dlock.WithRecampaign(e.recampaign)}
	if e.id != "" {
		opts = append(opts, dlock.WithIdentity(e.id))
	}
	return opts
}

// env is what the command learns of its term beside run's variables:
// DLOCK_TERM and DLOCK_LEADER; nothing for run (e nil).
func (e *election) env(ctx context.Context) []string {
	t, ok := dlock.TermFromContext(ctx)
	if e == nil || !ok {
		return nil
	}
	return []string{"DLOCK_TERM=" + strconv.FormatUint(t.Fence, 10), "DLOCK_LEADER=" + t.Leader}
}

func (a *app) electCmd() *cobra.Command {
	var rf runFlags
	var e election
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME [flags] [--] COMMAND [ARG]... | elect [flags] -c SHELL-COMMAND NAME",
		Short: "Run a command while this process leads an election",
		Long: `Elect campaigns in the election NAME and runs COMMAND while this process leads
it: of all the dlock elect (and programs using dlock.Lead) on NAME, on any
machines that share the backend, one leads at a time, and the others wait to
take over. An election is a lock on NAME: elect takes, extends and releases it
as dlock run does (see dlock run --help), and its flags are run's. By default it
waits (--wait forever) until it leads; -n exits 75 at once if someone else
leads.

The command gets DLOCK_TERM, the term number (the grant's fence: it grows with
every leadership of NAME), and DLOCK_LEADER, this candidate's identity (--id,
host:pid by default, which dlock leader shows), beside DLOCK_KEY, DLOCK_TOKEN
and DLOCK_FENCE (= DLOCK_TERM). Pass the term to what the leader writes, so a
leader that lost its term cannot write after the next one began.

When the command exits, elect resigns (releases the lock: the next candidate
leads at once) and exits with the command's status. When the leadership is
lost, elect sends SIGTERM to the command, then SIGKILL within --grace and
before the validity ends, as dlock run does, and exits 76; with --recampaign it
campaigns again instead and runs the command anew in the next term, until the
command exits by itself or elect gets a signal while it campaigns.

On etcd, NAME is the election of etcdctl elect NAME: each sees the other's
leader. On PostgreSQL the identity can be at most 42 bytes of printable ASCII.

` + exitCodesHelp,
		Example: `  # one replica runs the scheduler; the others wait to take over
  dlock elect --redis redis.internal:6379 --id "$(hostname)" scheduler ./scheduler

  # run again in the next term after a loss, until the command exits by itself
  dlock elect --recampaign --etcd http://etcd1:2379 compactor -- ./compact --loop

  # who leads?
  dlock leader --redis redis.internal:6379 scheduler`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("id") && e.id == "" {
				return usagef("--id: empty identity")
			}
			if !cmd.Flags().Changed("wait") && !rf.lf.nonblock {
				rf.lf.wait = forever
			}
			return a.runUnder(cmd, args, &rf, &e)
		},
	}
	a.addRunFlags(cmd, &rf, "leadership lease: how long the leadership outlives a dlock that stopped\nextending it (crashed, frozen, cut off), and so the longest wait for the next leader")
	cmd.Flags().StringVar(&e.id, "id", "", "this candidate's `IDENTITY`, which dlock leader shows (default host:pid)")
	cmd.Flags().BoolVar(&e.recampaign, "recampaign", false, "after a loss, campaign again and run the command anew in the next term\n(default: exit 76)")
	return cmd
}

func (a *app) leaderCmd() *cobra.Command {
	var bf backendFlags
	var watch, asJSON bool
	cmd := &cobra.Command{
		Use:   "leader [flags] NAME",
		Short: "Say who leads an election, or follow its changes",
		Long: `Leader prints who leads the election NAME (see dlock elect) on one line: the
leader's identity, its term and since when where the backend knows it, or that
nobody leads, which exits 3. With --json the line is a JSON object:
{"name", "led", "leader", "term", "since"}.

With -w (--watch) it prints a line at the start and one at every change it
sees, nobody included, until interrupted (SIGINT or SIGTERM: exit 0), as
etcdctl elect -l does, but never a lower term after a higher one, and with a
line when the leader is gone. It reads the leader every 50-100ms. A backend
that cannot be read is said on stderr, and the reading goes on.

On Redis the leader is the one its grant published (dlock elect, dlock.Lead);
on Redlock what a majority of the nodes report (no majority agreeing is an
error); on etcd the key of NAME with the lowest revision, so etcdctl elect's
leaders are shown too; on PostgreSQL the session that holds NAME's advisory
lock and what its application_name says.

` + exitCodesHelp,
		Example: `  dlock leader --redis redis.internal:6379 scheduler
  dlock leader --json --etcd http://etcd1:2379 compactor
  dlock leader -w --postgres "$DSN" scheduler`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want one election NAME, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			be, err := a.openBackend(cmd.Context(), cmd, &bf, useRun)
			if err != nil {
				return err
			}
			defer be.close()
			p := termPrinter{a: a, json: asJSON}
			if watch {
				return p.watch(cmd.Context(), be, args[0])
			}
			t, err := dlock.Leader(cmd.Context(), be.locker, args[0])
			if err != nil {
				return leaderError(err)
			}
			p.print(t)
			if !t.Led {
				return &exitError{code: exitNobody}
			}
			return nil
		},
	}
	addBackendFlags(cmd, &bf)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print the leader, then every change, until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each term as a JSON object on one line")
	return cmd
}

// leaderError turns an error of reading the leader into an exit code.
func leaderError(err error) error {
	switch {
	case errors.Is(err, dlock.ErrInvalid):
		return &usageError{err: err}
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.ErrMisconfigured):
		return backendError(err)
	}
	return exitf(exitFailure, "%v", err)
}

// termPrinter prints terms for dlock leader.
type termPrinter struct {
	a    *app
	json bool
}

// termJSON is a term as dlock leader --json prints it.
type termJSON struct {
	Name   string     `json:"name"`
	Led    bool       `json:"led"`
	Leader string     `json:"leader,omitempty"`
	Term   uint64     `json:"term,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

func (p termPrinter) print(t dlock.Term) {
	if p.json {
		j := termJSON{Name: t.Name, Led: t.Led, Leader: t.Leader, Term: t.Fence}
		if !t.Since.IsZero() {
			since := t.Since.UTC()
			j.Since = &since
		}
		b, _ := json.Marshal(j)
		p.a.stdout.Write(append(b, '\n'))
		return
	}
	line := t.String()
	if !t.Since.IsZero() {
		line += " since " + t.Since.UTC().Format(time.RFC3339)
	}
	p.a.stdout.Write([]byte(line + "\n"))
}

// watch prints every change of name's leader until a signal ends it.
func (p termPrinter) watch(ctx context.Context, be *backend, name string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for t, err := range dlock.Observe(ctx, be.locker, name) {
		if err != nil {
			if errors.Is(err, dlock.ErrInvalid) {
				return &usageError{err: err}
			}
			p.a.errorf("%s: %v", p.a.name, err)
			continue
		}
		p.print(t)
	}
	return nil
}
