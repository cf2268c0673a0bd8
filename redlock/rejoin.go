package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/scripts"
)

// adminTimeout bounds each request of Rejoin and Reseed to one node: they
// are operator actions, scanning keys, not on any lock's clock.
func (l *Locker) adminTimeout() time.Duration { return max(10*l.nodeTimeout, 2*time.Second) }

// Rejoin brings nodes that restarted without their data (see the package
// documentation) back into the fence majority for every key at once: it
// reads every fence counter from all nodes, writes the maximum of each to the
// rejoined nodes, and then marks them trusted, so that keys not used since
// the restart do not run into ErrFenceUnavailable once more than a minority
// of nodes has rejoined. Run it after restarting a node without persistence.
//
// Every node must answer (the error matches dlock.ErrUnavailable otherwise),
// and every key must have trusted counters on a majority; keys that do not —
// more than a minority lost their data at once — are named in an error
// matching ErrFenceUnavailable and nothing is marked trusted (see Reseed).
// It returns how many nodes it marked trusted. It is safe to run while locks
// are in use, and to run again.
func (l *Locker) Rejoin(ctx context.Context) (int, error) {
	if ctx == nil {
		return 0, dlock.Invalidf("nil context")
	}
	if !l.amnesiaRule {
		return 0, nil
	}
	markers, err := l.markers(ctx, len(l.nodes), false)
	if err != nil {
		return 0, err
	}
	var rejoined []int
	for i, r := range markers {
		if r.trust == "own" {
			rejoined = append(rejoined, i)
		}
	}
	if len(rejoined) == 0 {
		return 0, nil
	}
	counters, err := l.scanCounters(ctx)
	if err != nil {
		return 0, err
	}
	var lost []string
	for batch := range slices.Chunk(counters, 100) {
		reads := l.readCounters(ctx, batch)
		var keys, values []string // the counters that may be copied
		for k := range batch {
			var v int64
			trusted := 0
			for _, r := range reads {
				if r.err != nil {
					return 0, fmt.Errorf("dlock: rejoin: %w: %v", dlock.ErrUnavailable, r.err)
				}
				v = max(v, r.n[k])
				if r.flag[k] != 0 {
					trusted++
				}
			}
			if trusted < l.quorum {
				// Its value may be lost: copying it would make it trusted.
				lost = append(lost, batch[k])
				continue
			}
			keys = append(keys, batch[k])
			values = append(values, strconv.FormatInt(v, 10))
		}
		if len(keys) == 0 {
			continue
		}
		for _, i := range rejoined {
			if err := l.rejoinNode(ctx, i, reads[i].epoch, append([]string{MarkerKey}, keys...), append([]any{reads[i].epoch, "seed"}, anys(values)...)); err != nil {
				return 0, err
			}
		}
	}
	if len(lost) > 0 {
		return 0, fmt.Errorf("dlock: rejoin: %w: %d counters have fewer than %d trusted copies (more than a minority of nodes lost them; see Reseed), e.g. %q",
			ErrFenceUnavailable, len(lost), l.quorum, lost[0])
	}
	for _, i := range rejoined {
		if err := l.rejoinNode(ctx, i, markers[i].epoch, []string{MarkerKey}, []any{markers[i].epoch, "promote", "0"}); err != nil {
			return 0, err
		}
	}
	return len(rejoined), nil
}

// Reseed is the operator's way out when more than a minority of nodes lost
// their data at once (Rejoin reports it) or all of them did: it marks every
// node trusted and makes every fence counter start at floor, for every key.
// floor must exceed every fence ever issued on these nodes — the highest
// fence your resources have seen, or a value safely above it such as the
// current Unix time in microseconds — and be below 2^53. A floor that is too
// low lets fences go back; the resources' guards then reject the lower ones.
// A majority of nodes must answer; those that do not get their marker (and
// untrusted counters) when they come back. It returns how many nodes it
// reseeded.
func (l *Locker) Reseed(ctx context.Context, floor uint64) (int, error) {
	if ctx == nil {
		return 0, dlock.Invalidf("nil context")
	}
	if floor == 0 || floor >= 1<<53 {
		return 0, dlock.Invalidf("reseed floor %d: must be in [1, 2^53)", floor)
	}
	if !l.amnesiaRule {
		return 0, dlock.Invalidf("reseed with the amnesia rule off: there are no markers to reseed")
	}
	markers, err := l.markers(ctx, l.quorum, true)
	if err != nil {
		return 0, err
	}
	n := 0
	for i, r := range markers {
		if r.err != nil {
			continue
		}
		if err := l.rejoinNode(ctx, i, r.epoch, []string{MarkerKey}, []any{r.epoch, "promote", strconv.FormatUint(floor, 10)}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// markers reads every node's marker (giving marker-less nodes theirs first)
// and fails unless at least need nodes answered with a marker. A node that
// still has none afterwards (a replica refuses the write) counts as failed.
func (l *Locker) markers(ctx context.Context, need int, force bool) ([]*nodeReply, error) {
	var reads []*nodeReply
	for try := range 2 {
		reads = l.readCounters(ctx, nil)
		missing := false
		for _, r := range reads {
			missing = missing || (r.err == nil && r.marker == "none")
		}
		if !missing || try == 1 {
			break
		}
		l.placeMarkers(ctx, l.adminTimeout(), reads, force)
	}
	answered := 0
	var failed error
	for i, r := range reads {
		if r.err == nil && r.marker == "none" {
			r.err = errors.New("has no node marker and could not be given one (a replica?)")
		}
		if r.err != nil {
			failed = fmt.Errorf("node %s: %v", l.nodes[i].name, r.err)
			continue
		}
		answered++
	}
	if answered < need {
		return nil, fmt.Errorf("dlock: %w: %d of %d nodes answered, need %d: %v", dlock.ErrUnavailable, answered, len(reads), need, failed)
	}
	return reads, nil
}

// readCounters reads the given counters and the marker of every node.
func (l *Locker) readCounters(ctx context.Context, counters []string) []*nodeReply {
	ks := append(append([]string{MarkerKey}, counters...), counters...) // lock-key slots unused when reading
	timeout := l.adminTimeout()
	argv := scripts.RedlockAcquire.Argv(ks, "", 1, "1", dlock.NewToken(), "read")
	return fanOut(ctx, l, timeout, func(ctx context.Context, n *node) *nodeReply {
		v, err := scripts.RedlockAcquire.Run(ctx, n.client, &n.funcs, argv).Slice()
		return l.reply(v, err, len(counters), timeout)
	})
}

// scanCounters lists the fence counters on all nodes.
func (l *Locker) scanCounters(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	for _, n := range l.nodes {
		nctx, cancel := context.WithTimeout(ctx, l.adminTimeout()*10)
		iter := n.client.Scan(nctx, 0, "dlock:redlock:fence:*", 1000).Iterator()
		for iter.Next(nctx) {
			seen[iter.Val()] = true
		}
		err := iter.Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dlock: rejoin: %w: scan %s: %v", dlock.ErrUnavailable, n.name, err)
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

func (l *Locker) rejoinNode(ctx context.Context, i int, epoch string, keys []string, args []any) error {
	ctx, cancel := context.WithTimeout(ctx, l.adminTimeout())
	defer cancel()
	n := l.nodes[i]
	ok, err := scripts.RedlockRejoin.Run(ctx, n.client, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("dlock: rejoin: %w: node %s: %v", dlock.ErrUnavailable, n.name, err)
	}
	if ok != 1 {
		return fmt.Errorf("dlock: rejoin: %w: node %s restarted while it was being rejoined (epoch %s); run it again", dlock.ErrUnavailable, n.name, epoch)
	}
	return nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
