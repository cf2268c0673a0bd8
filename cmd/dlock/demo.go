package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/demo"
)

func (a *app) demoCmd() *cobra.Command {
	var urls []string
	var tl string
	cmd := &cobra.Command{
		Use:   "demo [--redis URL]...",
		Short: "Show, on real servers, how distributed locks fail and what prevents it",
		Long: `Demo runs dlock's scenarios in order and narrates each one with
its real outcome: a basic acquire and release; the expiry bug, first with a
plain DEL (a slow holder deletes its successor's lock) and then with a
token-checked release (it cannot); the release script; fencing, with the
resource rejecting a stale holder's late write; a leader election, where a
leader frozen past its lease is replaced in a higher term and its late write
is refused by its term; five workers taking turns
through the Do helper; Redlock on five servers, surviving the loss of two and
refusing to lock with three lost; and etcd on three members of its own, where
the fence is the cluster's revision, the leader's loss changes nothing, and a
holder paused past its lease has its late write refused (etcd processes where
an etcd binary is on PATH, etcd's own server inside dlock otherwise).

Where PostgreSQL's server binaries are installed (/usr/lib/postgresql/*/bin),
a last scenario runs on a temporary cluster (initdb in a temporary directory):
an advisory lock held in Do, its session ended with pg_terminate_backend, the
lock going to a waiter with a higher fence, the first holder's late write
refused by pgfence and its Do reporting the loss, and a queue whose workers
claim jobs with SKIP LOCKED, each job done exactly once. Where they are not,
the first lines say how to see it.

Every outcome is checked against what its scenario claims: a mismatch prints FAILED
on its line and dlock demo exits 1 after the other scenarios ran.

Without --redis it starts five temporary redis-server processes (found on PATH)
on free loopback ports and removes them when it ends, even on Ctrl-C. Only where
no redis-server exists it falls back to an embedded in-process server, and says
so in its first line. With --redis the single-node scenarios run on the first
server, under keys with a random "dlock-demo:XXXXXXXX:" prefix that are deleted
at the end; Redlock uses every server given, plus temporary local ones when
fewer than five are given. A server you name is never stopped: the demo "loses"
it by cutting an in-process relay to it. DLOCK_REDIS is ignored: the demo only
touches servers named on its command line.

` + exitCodesHelp,
		Example: `  dlock demo
  dlock demo --timeline demo.svg
  dlock demo --redis redis://127.0.0.1:6379`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected arguments %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.redisURLs(urls); err != nil {
				return err
			}
			ctx, interrupted, stop := interruptible(cmd.Context())
			defer stop()
			err := demo.Run(ctx, a.stdout, demo.Options{RedisURLs: urls, Timeline: tl})
			if sig := interrupted(); sig != nil {
				return exitf(signalCode(sig), "demo interrupted by %v", sig)
			}
			switch {
			case err == nil:
				return nil
			case errors.Is(err, dlock.ErrInvalid):
				return &usageError{err: err}
			case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.ErrMisconfigured):
				return exitf(backendCode(err), "demo: %v", err)
			}
			return exitf(exitFailure, "demo: %v", err)
		},
	}
	cmd.Flags().StringArrayVar(&urls, "redis", nil, "run on this Redis `URL` instead of temporary servers; repeat it for more Redlock nodes")
	cmd.Flags().StringVar(&tl, "timeline", "", "also draw the scenarios with several clients to `FILE` (.svg, or .html)")
	return cmd
}
