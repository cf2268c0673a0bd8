package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// lockRow is one held lock on one node, as inspect reports it. The JSON
// field names are part of the CLI contract.
type lockRow struct {
	Key      string      `json:"key"`
	Node     string      `json:"node"`
	TTLms    int64       `json:"ttl_ms"` // remaining time to live (PTTL); 0 for PostgreSQL
	Fence    *uint64     `json:"fence"`  // the key's fence counter; null without one
	Holder   *holderInfo `json:"holder"` // null unless the holder published itself (or PostgreSQL knows it)
	Token    string      `json:"token,omitempty"`
	Waiting  int         `json:"waiting"`
	Majority bool        `json:"majority"`
}

// holderInfo is who holds a lock, as inspect shows it: what `dlock run`
// and the backends' WithHolderInfo publish beside a Redis lock (host, pid,
// service, since), or what PostgreSQL knows of the session. It is
// informational only: the lock key and its token decide who holds the
// lock.
type holderInfo struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Service string    `json:"service,omitempty"`
	Since   time.Time `json:"since"`
}

func (a *app) inspectCmd() *cobra.Command {
	var (
		bf     backendFlags
		asJSON bool
		watch  time.Duration
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "inspect [flags] [PATTERN]",
		Short: "List held locks: key, remaining TTL, fence, holder",
		Long: `Inspect lists the held locks whose keys match PATTERN (a glob, default
"*"): each key's remaining TTL, its fence counter (if dlock took the lock at
least once: the holder's fence, or higher, since a refused attempt on one
node draws a number too; with Redlock, that node's counter), the number of
waiters queued behind it and, when the holder published itself (dlock run;
the backends' WithHolderInfo option), its host, pid, service and start time.

Redis: any string key with a TTL is listed, because a lock taken by another
client (node-redlock, redsync, a plain SET NX PX) looks exactly like that:
narrow the listing with PATTERN. dlock's own keys (dlock:*) are skipped
unless PATTERN starts with "dlock:". The keys are found with SCAN, never
KEYS, so a large database is not blocked (SCAN ... TYPE needs Redis 6 or
later); a lock taken or released during the scan may be missed or reported.
With several --redis URLs (Redlock) every node is listed separately, and
MAJORITY says whether a majority of the nodes hold the key with the same
token.

PostgreSQL: the exclusive advisory locks of the database (pg_locks), with the
holding session's pid, application_name and start (the server does not
record when a lock was granted; a session is never younger than its locks).
A lock is named by its advisory key, "advisory:<n>" or "advisory:<a>,<b>",
or, when PATTERN is a plain lock name, by that name.

etcd: the locks whose names match PATTERN (dlock's, concurrency.Mutex's and
etcdctl lock's alike), with the holder's token, its lease's remaining TTL, the
fence (the holder key's create revision), the waiters queued behind it and,
for dlock run, who holds it; every read is linearizable.

--limit bounds the listing (default 1000). --watch 2s redraws it every 2s,
clearing the screen, until interrupted.

With --json the output is one object:
  {"locks":[{"key":"billing","node":"10.0.0.5:6379","ttl_ms":28500,
             "fence":42,"holder":{"host":"web-1","pid":4242,
             "since":"2026-12-01T10:00:00Z"},"token":"...",
             "waiting":0,"majority":true}]}
"fence" and "holder" are null when absent; "locks" is [] when nothing matches.

` + exitCodesHelp,
		Example: `  dlock inspect --redis redis://redis.internal:6379
  dlock inspect 'billing:*' --json | jq '.locks[] | select(.ttl_ms < 5000)'
  dlock inspect --postgres postgres://db/app --watch 2s
  dlock inspect --etcd http://etcd-1:2379 'deploy:*'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("at most one PATTERN, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			pattern := "*"
			if len(args) == 1 {
				pattern = args[0]
			}
			if limit < 0 {
				return usagef("--limit %d: must not be negative", limit)
			}
			if watch < 0 {
				return usagef("--watch %v: must not be negative", watch)
			}
			be, err := a.openBackend(cmd.Context(), cmd, &bf, useInspect)
			if err != nil {
				return err
			}
			defer be.close()
			in, ok := be.locker.(dlock.Inspector)
			if !ok {
				return exitf(exitFailure, "the %s backend cannot list its locks", be.kind)
			}
			// load reads the listing, and returns what prints it: a screen
			// of --watch is cleared only once its rows are in.
			load := func(ctx context.Context) (draw func() error, err error) {
				rows, err := inspectRows(ctx, in, pattern, limit)
				if err != nil {
					return nil, err
				}
				return func() error {
					if asJSON {
						return json.NewEncoder(a.stdout).Encode(struct {
							Locks []lockRow `json:"locks"`
						}{rows})
					}
					return printLocks(a, rows, len(be.nodes) > 1, pattern)
				}, nil
			}
			if watch == 0 {
				draw, err := load(cmd.Context())
				if err != nil {
					return err
				}
				return draw()
			}
			return watchLocks(cmd.Context(), a, watch, load)
		},
	}
	addBackendFlags(cmd, &bf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) instead of a table")
	cmd.Flags().DurationVar(&watch, "watch", 0, "redraw the listing every `INTERVAL` (e.g. 2s), like top, until interrupted")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most `N` locks (default 1000)")
	return cmd
}

// inspectRows lists the locks through the backend's Inspect.
func inspectRows(ctx context.Context, in dlock.Inspector, pattern string, limit int) ([]lockRow, error) {
	infos, err := in.Inspect(ctx, pattern, limit)
	if err != nil {
		switch {
		case errors.Is(err, dlock.ErrInvalid):
			return nil, &usageError{err: err}
		case errors.As(err, new(redis.Error)):
			return nil, exitf(exitFailure, "%v", err) // the server refused (SCAN ... TYPE before Redis 6)
		case errors.Is(err, dlock.ErrUnavailable):
			return nil, unreachable(err)
		}
		return nil, exitf(exitFailure, "inspect: %v", err)
	}
	rows := make([]lockRow, 0, len(infos))
	for _, li := range infos {
		r := lockRow{Key: li.Key, Node: li.Node, TTLms: li.TTL.Milliseconds(), Token: li.Token,
			Waiting: li.Waiting, Majority: li.Majority}
		if li.Fence != 0 {
			f := li.Fence
			r.Fence = &f
		}
		if li.Host != "" || li.PID != 0 || li.Service != "" || !li.Since.IsZero() {
			r.Holder = &holderInfo{Host: li.Host, PID: li.PID, Service: li.Service, Since: li.Since}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// watchLocks redraws the listing every interval, clearing the terminal
// first, until ctx ends or an interrupt arrives (then it returns nil).
func watchLocks(ctx context.Context, a *app, every time.Duration, load func(context.Context) (func() error, error)) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		draw, err := load(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // cursor home, clear screen
		fmt.Fprintf(a.stdout, "every %v, %s\n\n", every, time.Now().Format(time.TimeOnly))
		if err := draw(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func printLocks(a *app, rows []lockRow, withNode bool, pattern string) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no held locks match %q\n", pattern)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if withNode {
		fmt.Fprint(tw, "NODE\t")
	}
	fmt.Fprint(tw, "KEY\tTTL\tFENCE\tWAITING\t")
	if withNode {
		fmt.Fprint(tw, "MAJORITY\t")
	}
	fmt.Fprintln(tw, "HOLDER")
	now := time.Now()
	for _, r := range rows {
		if withNode {
			fmt.Fprintf(tw, "%s\t", r.Node)
		}
		ttl, fence, holder := "-", "-", "-"
		if r.TTLms > 0 {
			ttl = (time.Duration(r.TTLms) * time.Millisecond).String()
		}
		if r.Fence != nil {
			fence = strconv.FormatUint(*r.Fence, 10)
		}
		if h := r.Holder; h != nil {
			holder = ""
			if h.Host != "" {
				holder = h.Host + " "
			}
			holder += fmt.Sprintf("pid %d", h.PID)
			if h.Service != "" {
				holder += " (" + h.Service + ")"
			}
			if !h.Since.IsZero() {
				holder += fmt.Sprintf(" since %s (%v ago)", h.Since.Format(time.RFC3339), now.Sub(h.Since).Round(time.Second))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t", r.Key, ttl, fence, r.Waiting)
		if withNode {
			maj := "no"
			if r.Majority {
				maj = "yes"
			}
			fmt.Fprintf(tw, "%s\t", maj)
		}
		fmt.Fprintln(tw, holder)
	}
	return tw.Flush()
}
