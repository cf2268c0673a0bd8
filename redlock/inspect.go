package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rinspect"
)

var _ dlock.Inspector = (*Locker)(nil)

// Inspect lists, node by node, the held locks whose keys (without the
// Locker's prefix) match pattern, a Redis glob: one LockInfo per node that
// holds the key, with that node's TTL, token, fence counter (the node's
// draw: the lock's fence is the largest), published holder and queued
// Lockers. Majority reports whether a majority of the nodes (Quorum) hold
// the key with that token: a key on a minority is the residue of a failed
// or expiring acquisition, not a lock.
//
// Every node is scanned (see redislock's Inspect), then each key found on
// some node is read on the nodes whose scan missed it, so that Majority is
// exact for the keys listed: at most limit (0: 1000), each on every node
// that holds it. A node that does not answer is left out, and named by the
// error (matching dlock.ErrUnavailable); Majority counts it as not holding.
func (l *Locker) Inspect(ctx context.Context, pattern string, limit int) ([]dlock.LockInfo, error) {
	pattern, _, limit, err := backend.CheckInspect(ctx, pattern, limit)
	if err != nil {
		return nil, err
	}
	scanned, scanErrs := l.scan(ctx, pattern, limit)
	// The keys listed: the first limit of all the nodes found.
	found := map[string]bool{}
	for _, rows := range scanned {
		for _, r := range rows {
			found[r.Key] = true
		}
	}
	listed := slices.Sorted(maps.Keys(found))
	listed = listed[:min(limit, len(listed))]
	var errs []error
	var rows []dlock.LockInfo
	refused := 0
	for i, n := range l.nodes {
		r, err := l.complete(ctx, n, scanned[i], scanErrs[i], listed)
		if err != nil {
			errs = append(errs, err)
			if isRefusal(err) {
				refused++
			}
			continue
		}
		rows = append(rows, r...)
	}
	votes := map[[2]string]int{}
	for _, r := range rows {
		votes[[2]string{r.Key, r.Token}]++
	}
	for i := range rows {
		rows[i].Majority = votes[[2]string{rows[i].Key, rows[i].Token}] >= l.quorum
	}
	rows = rinspect.Sort(rows)
	if len(errs) == 0 {
		return rows, nil
	}
	sentinel := dlock.ErrUnavailable
	if l.tooMany(refused) {
		sentinel = dlock.ErrMisconfigured
	}
	return rows, fmt.Errorf("dlock: inspect: %w: %w", sentinel, nodeerr.OneLine(errors.Join(errs...)))
}

// scan scans every node but duplicates of an earlier one, in parallel, and
// returns each node's rows and error.
func (l *Locker) scan(ctx context.Context, pattern string, limit int) ([][]dlock.LockInfo, []error) {
	rows, errs := make([][]dlock.LockInfo, len(l.nodes)), make([]error, len(l.nodes))
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		if n.dupOf.Load() != 0 {
			continue // the same server as an earlier node
		}
		wg.Go(func() { rows[i], errs[i] = rinspect.Scan(ctx, n.Client, n.Name, l.cfg.Prefix, pattern, limit) })
	}
	wg.Wait()
	return rows, errs
}

// complete returns node n's rows of the listed keys: those its scan found
// (scanned, or its error), and those it missed, read on it now.
func (l *Locker) complete(ctx context.Context, n *node, scanned []dlock.LockInfo, err error,
	listed []string) ([]dlock.LockInfo, error) {
	if err != nil {
		return nil, &dlock.NodeError{Node: n.Name, Err: err}
	}
	byKey := func(r dlock.LockInfo, k string) int { return strings.Compare(r.Key, k) }
	var rows []dlock.LockInfo
	var missing []string
	for _, k := range listed {
		if j, ok := slices.BinarySearchFunc(scanned, k, byKey); ok { // Scan sorts by key
			rows = append(rows, scanned[j])
		} else {
			missing = append(missing, l.cfg.Prefix+k)
		}
	}
	if len(missing) > 0 && n.dupOf.Load() == 0 {
		r, err := rinspect.Describe(ctx, n.Client, n.Name, l.cfg.Prefix, missing)
		if err != nil {
			return nil, &dlock.NodeError{Node: n.Name, Err: err}
		}
		rows = append(rows, r...)
	}
	return rows, nil
}
