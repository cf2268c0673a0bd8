package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock/internal/keys"
)

// lockRow is one held lock on one node, as inspect reports it. The JSON
// field names are part of the CLI contract.
type lockRow struct {
	Key    string      `json:"key"`
	Node   string      `json:"node"`
	TTLms  int64       `json:"ttl_ms"` // remaining time to live (PTTL)
	Fence  *uint64     `json:"fence"`  // the key's fence counter; null without one
	Holder *holderInfo `json:"holder"` // null unless the holder published itself
}

// ownPrefix is where dlock keeps its auxiliary keys (fences, holders).
const ownPrefix = "dlock:"

func (a *app) inspectCmd() *cobra.Command {
	var (
		bf     backendFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "inspect [flags] [PATTERN]",
		Short: "List held locks: key, remaining TTL, fence, holder",
		Long: `Inspect lists the locks held in Redis whose keys match PATTERN (a Redis
glob, default "*"): each key's remaining TTL, its fence counter (if dlock took
the lock at least once: the holder's fence, or higher, since a refused attempt
on one node draws a number too; with Redlock, that node's counter) and, when
the holder is a dlock run that published itself, the holder's host, pid and
start time. When a release hands the lock to a waiting dlock through a
reservation (after a hold under 1ms), the key holds the reservation for up to
half a second and is listed too.

Any string key with a TTL is listed, because a lock taken by another client
(node-redlock, redsync, a plain SET NX PX) looks exactly like that: narrow the
listing with PATTERN. dlock's own keys (dlock:*) are skipped unless PATTERN
starts with "dlock:". The keys are found with SCAN, never KEYS, so a large
database is not blocked (SCAN ... TYPE needs Redis 6 or later); a lock taken or
released during the scan may be missed or reported. With several --redis URLs
(Redlock) every node is listed separately.

With --json the output is one object:
  {"locks":[{"key":"billing","node":"10.0.0.5:6379","ttl_ms":28500,
             "fence":42,"holder":{"host":"web-1","pid":4242,
             "since":"2026-12-01T10:00:00Z"}}]}
"fence" and "holder" are null when absent; "locks" is [] when nothing matches.

` + exitCodesHelp,
		Example: `  dlock inspect --redis redis://redis.internal:6379
  dlock inspect 'billing:*' --json | jq '.locks[] | select(.ttl_ms < 5000)'`,
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
			be, err := a.openBackend(cmd.Context(), cmd, &bf, useInspect)
			if err != nil {
				return err
			}
			defer be.close()
			rows := []lockRow{}
			for i, c := range be.clients {
				r, err := scanLocks(cmd.Context(), c, be.nodes[i], pattern)
				if err != nil {
					var re redis.Error
					if errors.As(err, &re) {
						return exitf(exitFailure, "inspect %s: %v", be.nodes[i], err)
					}
					return exitf(exitUnavailable, "backend unreachable: %s: %v", be.nodes[i], err)
				}
				rows = append(rows, r...)
			}
			sort.Slice(rows, func(i, j int) bool {
				if rows[i].Key != rows[j].Key {
					return rows[i].Key < rows[j].Key
				}
				return rows[i].Node < rows[j].Node
			})
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(struct {
					Locks []lockRow `json:"locks"`
				}{rows})
			}
			return printLocks(a, rows, len(be.clients) > 1, pattern)
		},
	}
	addBackendFlags(cmd, &bf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) instead of a table")
	return cmd
}

// scanLocks finds the string keys with a TTL that match pattern on one node,
// with their fence counters and holder info.
func scanLocks(ctx context.Context, c redis.UniversalClient, node, pattern string) ([]lockRow, error) {
	skipOwn := !strings.HasPrefix(pattern, ownPrefix)
	seen := map[string]bool{}
	var rows []lockRow
	var cursor uint64
	for {
		batch, next, err := c.ScanType(ctx, cursor, pattern, 1000, "string").Result()
		if err != nil {
			return nil, err
		}
		var found []string
		for _, k := range batch {
			if !seen[k] && !(skipOwn && strings.HasPrefix(k, ownPrefix)) {
				seen[k] = true
				found = append(found, k)
			}
		}
		if len(found) > 0 {
			r, err := describe(ctx, c, node, found)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
		if cursor = next; cursor == 0 {
			return rows, nil
		}
	}
}

// describe reads the TTL, fence and holder of keys in one round trip.
func describe(ctx context.Context, c redis.UniversalClient, node string, found []string) ([]lockRow, error) {
	type reply struct {
		ttl           *redis.DurationCmd
		fence, holder *redis.StringCmd
	}
	replies := make([]reply, len(found))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range found {
			replies[i] = reply{p.PTTL(ctx, k), p.Get(ctx, keys.Fence(k)), p.Get(ctx, keys.Holder(k))}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, err
	}
	var rows []lockRow
	for i, k := range found {
		ttl, err := replies[i].ttl.Result()
		if err != nil || ttl <= 0 {
			continue // no expiry (not a lock) or gone since the scan
		}
		row := lockRow{Key: k, Node: node, TTLms: ttl.Milliseconds()}
		// The key's fence counter: the lock's fence on one node, this
		// node's draw for Redlock (the lock's fence is the largest).
		if s, err := replies[i].fence.Result(); err == nil {
			if f, err := strconv.ParseUint(s, 10, 64); err == nil {
				row.Fence = &f
			}
		}
		if s, err := replies[i].holder.Result(); err == nil {
			var h holderInfo
			if json.Unmarshal([]byte(s), &h) == nil {
				row.Holder = &h
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
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
	fmt.Fprintln(tw, "KEY\tTTL\tFENCE\tHOLDER")
	now := time.Now()
	for _, r := range rows {
		if withNode {
			fmt.Fprintf(tw, "%s\t", r.Node)
		}
		fence, holder := "-", "-"
		if r.Fence != nil {
			fence = strconv.FormatUint(*r.Fence, 10)
		}
		if h := r.Holder; h != nil {
			holder = fmt.Sprintf("%s pid %d since %s (%v ago)", h.Host, h.PID,
				h.Since.Format(time.RFC3339), now.Sub(h.Since).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", r.Key, time.Duration(r.TTLms)*time.Millisecond, fence, holder)
	}
	return tw.Flush()
}
