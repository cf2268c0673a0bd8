package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

func (a *app) inspectCmd() *cobra.Command {
	var (
		bf        backendFlags
		asJSON    bool
		showToken bool
		watch     time.Duration
		limit     int
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

A semaphore's permits (dlock run --limit) are listed under their slots' keys,
{KEY}#SLOT, followed by a line per semaphore: how many of its limit are held
(PostgreSQL: among the permits it can name). List one semaphore with
dlock inspect '{KEY}#*'.

--limit bounds the listing (default 1000). --watch 2s lists again every 2s
until interrupted: on a terminal it clears the screen and redraws the table
under a line with the time; into a pipe or a file it writes no terminal
escapes, and with --json it writes one JSON document per line (NDJSON), so
that jq and log shippers read every listing.

Tokens are secrets (whoever has one can release or extend the lock in its
holder's place): they are shown only with --show-token, as a TOKEN column
or a "token" field.

With --json the output is one object (one line) per listing:
  {"locks":[{"key":"billing","node":"10.0.0.5:6379","ttl_ms":28500,
             "fence":42,"holder":{"host":"web-1","pid":4242,"service":"api",
             "since":"2026-12-01T10:00:00Z"},"waiting":0,"majority":true}]}
"ttl_ms" is the remaining TTL in milliseconds (0: none, as on PostgreSQL);
"fence" and "holder" are null when absent; "service" and "since" are left
out when unknown; "token" appears with --show-token; "locks" is [] when
nothing matches. A semaphore's permit has "limit" too. Each lock is the Go
library's dlock.LockInfo, which encodes and decodes this form.

` + exitCodesHelp,
		Example: `  dlock inspect --redis redis://redis.internal:6379
  dlock inspect 'billing:*' --json | jq '.locks[] | select(.ttl_ms < 5000)'
  dlock inspect --watch 5s --json | jq -c '[.locks[].key]'
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
				infos, err := inspectLocks(ctx, in, pattern, limit)
				if err != nil {
					return nil, err
				}
				return func() error {
					if asJSON {
						return printLocksJSON(a, infos, showToken)
					}
					return printLocks(a, infos, len(be.nodes) > 1, pattern, showToken)
				}, nil
			}
			if watch == 0 {
				draw, err := load(cmd.Context())
				if err != nil {
					return err
				}
				return draw()
			}
			// A terminal gets a fresh screen per listing; a pipe gets the
			// listings one after the other (NDJSON with --json).
			return watchLocks(cmd.Context(), a, watch, !asJSON && isTerminal(a.stdout), load)
		},
	}
	addBackendFlags(cmd, &bf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) instead of a table; with --watch, one document per line")
	cmd.Flags().BoolVar(&showToken, "show-token", false, "also show each holder's token (a secret: it can release the lock)")
	cmd.Flags().DurationVar(&watch, "watch", 0, "list again every `INTERVAL` (e.g. 2s) until interrupted; on a terminal, redraw the screen like top")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most `N` locks (default 1000)")
	return cmd
}

// inspectLocks lists the locks through the backend's Inspect; nothing
// held is an empty, non-nil list (JSON []).
func inspectLocks(ctx context.Context, in dlock.Inspector, pattern string, limit int) ([]dlock.LockInfo, error) {
	infos, err := in.Inspect(ctx, pattern, limit)
	if err != nil {
		switch {
		case errors.Is(err, dlock.ErrInvalid):
			return nil, &usageError{err: err}
		case errors.Is(err, dlock.ErrMisconfigured):
			return nil, backendError(err)
		case errors.As(err, new(redis.Error)):
			return nil, exitf(exitFailure, "%v", err) // the server refused (SCAN ... TYPE before Redis 6)
		case errors.Is(err, dlock.ErrUnavailable):
			return nil, backendError(err)
		}
		return nil, exitf(exitFailure, "inspect: %v", err)
	}
	if infos == nil {
		infos = []dlock.LockInfo{}
	}
	return infos, nil
}

// printLocksJSON writes {"locks":[...]} on one line, each lock in
// dlock.LockInfo's JSON form, with its token only when showToken is set.
func printLocksJSON(a *app, infos []dlock.LockInfo, showToken bool) error {
	enc := dlock.LockInfo.MarshalJSON
	if showToken {
		enc = dlock.LockInfo.MarshalJSONWithToken
	}
	locks := make([]json.RawMessage, len(infos))
	for i, li := range infos {
		b, err := enc(li)
		if err != nil {
			return err
		}
		locks[i] = b
	}
	return json.NewEncoder(a.stdout).Encode(struct {
		Locks []json.RawMessage `json:"locks"`
	}{locks})
}

// watchLocks lists the locks every interval until ctx ends or an
// interrupt arrives (then it returns nil). With screen set (a terminal)
// each listing clears the screen first, under a line with the time.
func watchLocks(ctx context.Context, a *app, every time.Duration, screen bool, load func(context.Context) (func() error, error)) error {
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
		if screen {
			fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // cursor home, clear screen
			fmt.Fprintf(a.stdout, "every %v, %s\n\n", every, time.Now().Format(time.TimeOnly))
		}
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

func printLocks(a *app, infos []dlock.LockInfo, withNode bool, pattern string, showToken bool) error {
	if len(infos) == 0 {
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
	if showToken {
		fmt.Fprint(tw, "TOKEN\t")
	}
	fmt.Fprintln(tw, "HOLDER")
	now := time.Now()
	for _, li := range infos {
		if withNode {
			fmt.Fprintf(tw, "%s\t", li.Node)
		}
		ttl, fence := "-", "-"
		if li.TTL > 0 {
			ttl = li.TTL.Round(time.Millisecond).String()
		}
		if li.Fence != 0 {
			fence = strconv.FormatUint(li.Fence, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t", li.Key, ttl, fence, li.Waiting)
		if withNode {
			maj := "no"
			if li.Majority {
				maj = "yes"
			}
			fmt.Fprintf(tw, "%s\t", maj)
		}
		if showToken {
			fmt.Fprintf(tw, "%s\t", cmp.Or(li.Token, "-"))
		}
		fmt.Fprintln(tw, holderText(li, now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printSemaphores(a, infos, withNode)
}

// printSemaphores sums up the semaphores whose permits infos list: how
// many of the limit are held (on each node, for Redlock).
func printSemaphores(a *app, infos []dlock.LockInfo, withNode bool) error {
	type sem struct{ name, node string }
	held, limit := map[sem]int{}, map[sem]int{}
	var order []sem
	for _, li := range infos {
		name, ok := semaphoreOf(li)
		if !ok {
			continue
		}
		s := sem{name: name}
		if withNode {
			s.node = li.Node
		}
		if held[s] == 0 {
			order = append(order, s)
		}
		held[s]++
		limit[s] = li.Limit
	}
	for _, s := range order {
		on := ""
		if withNode {
			on = " on " + s.node
		}
		if _, err := fmt.Fprintf(a.stdout, "semaphore %s%s: %d of %d permits held\n", s.name, on, held[s], limit[s]); err != nil {
			return err
		}
	}
	return nil
}

// semaphoreOf returns what names the semaphore of a permit ({name}, its
// key without "#slot"), or false for a lock.
func semaphoreOf(li dlock.LockInfo) (string, bool) {
	i := strings.LastIndexByte(li.Key, '#')
	if li.Limit == 0 || i < 0 {
		return "", false
	}
	return li.Key[:i], true
}

// holderText is the HOLDER column: "web-1 pid 4242 (api) since ... (5s
// ago)", or "-" when the holder is unknown.
func holderText(li dlock.LockInfo, now time.Time) string {
	if li.Host == "" && li.PID == 0 && li.Service == "" && li.Since.IsZero() {
		return "-"
	}
	holder := ""
	if li.Host != "" {
		holder = li.Host + " "
	}
	holder += fmt.Sprintf("pid %d", li.PID)
	if li.Service != "" {
		holder += " (" + li.Service + ")"
	}
	if !li.Since.IsZero() {
		holder += fmt.Sprintf(" since %s (%v ago)", li.Since.Format(time.RFC3339), now.Sub(li.Since).Round(time.Second))
	}
	return holder
}
