package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/holder"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rnode"
	"github.com/dlock-go/dlock/internal/wake"
)

// nodeReply is one node's answer to an attempt (a permit's Fence is the
// node's limit when Status is rnode.Conflict).
type nodeReply struct {
	err error
	rnode.AcquireResult
}

func (r *nodeReply) granted() bool { return r.err == nil && r.Status == rnode.Granted }

// try is one acquisition: a lock on Keys (with the prefix), or a permit
// on one slot (Sem, Slot, Limit; Keys: the slot's).
type try struct {
	rnode.Attempt        // but the queue's arguments, which are per node (plan)
	display       string // the name the caller gave
	plan          *wake.Plan
}

func (l *Locker) tryAcquire(ctx context.Context, keys []string, display string, ttl time.Duration) (*dlock.Lock, error) {
	full, plan, err := l.prepare(ctx, keys, display, ttl)
	if err != nil {
		return nil, err
	}
	token := bridge.NewToken()
	since, identity := time.Now(), driver.Identity(ctx)
	rec := holder.Term(l.cfg.HolderHead, since, identity, token, 0)
	t := &try{Attempt: rnode.Attempt{Keys: full, Token: token, TTL: ttl, Holder: rec}, display: display, plan: plan}
	g, validUntil, err := l.acquireMajority(ctx, t)
	if err != nil {
		return nil, err
	}
	if identity != "" {
		l.publishTerm(ctx, g, since, identity, ttl)
	}
	return driver.NewLock(display, token, uint64(g.fence), validUntil, g), nil
}

// acquireMajority makes the attempt t, again after split votes, and
// returns the grant held by a majority and its validity, or the error of
// an attempt released on every node.
func (l *Locker) acquireMajority(ctx context.Context, t *try) (*grant, time.Time, error) {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		c := l.sendRound(ctx, t)
		fence, ok := l.awaitMajority(c)
		nodes, answered := l.quorum, 0 // the majority awaited; the others may still answer
		var replies []*nodeReply
		if !ok {
			replies = c.all()
			if err := l.dedupe(replies); err != nil {
				l.releaseEverywhere(ctx, t)
				return nil, time.Time{}, err
			}
			nodes = 0
			for _, r := range replies {
				if r.err == nil {
					answered++
				}
				if r.granted() {
					fence, nodes = max(fence, r.Fence), nodes+1
				}
			}
			ok = nodes >= l.quorum
		}
		if ok {
			validUntil := bridge.ValidUntil(start, t.TTL, l.cfg.DriftFactor)
			if elapsed := time.Since(start); validUntil.After(start.Add(elapsed)) {
				return &grant{l: l, keys: t.Keys, token: t.Token, holder: t.Holder, fence: fence, acquiring: c.progress,
					nodes: nodes, sem: t.Sem}, validUntil, nil
			}
			return nil, time.Time{}, l.fail(ctx, t, c.all(), dlock.ErrNotAcquired,
				fmt.Sprintf("the acquisition took %v: no validity left of ttl %v", time.Since(start).Round(time.Microsecond), t.TTL))
		}
		if err := l.conflict(ctx, t, replies); err != nil {
			return nil, time.Time{}, err
		}
		if attempt >= maxSplitRetries || !l.splitVote(replies) || ctx.Err() != nil {
			if answered < l.quorum {
				return nil, time.Time{}, l.fail(ctx, t, replies, dlock.ErrUnavailable, fmt.Sprintf("only %d nodes answered", answered))
			}
			return nil, time.Time{}, l.fail(ctx, t, replies, dlock.ErrNotAcquired, "")
		}
		// Nobody can hold a majority: the contenders split the vote. Undo
		// this attempt everywhere and try again after a random pause that
		// grows with each split, so one contender ends up alone.
		l.releaseEverywhere(ctx, t)
		base := max(time.Since(start), time.Millisecond)
		if !backend.Sleep(ctx, rand.N(base<<(attempt+1))) {
			return nil, time.Time{}, l.fail(ctx, t, replies, dlock.ErrNotAcquired, "")
		}
	}
}

// prepare checks an attempt's arguments and returns its keys with the
// prefix and, for one key, its wake-up plan; it refuses the attempt when
// this Locker's release just woke the longest waiter, which goes first.
func (l *Locker) prepare(ctx context.Context, keys []string, display string, ttl time.Duration) ([]string, *wake.Plan, error) {
	if ctx == nil {
		return nil, nil, bridge.Invalidf("nil context")
	}
	if err := l.cfg.CheckTTL(ttl); err != nil {
		return nil, nil, err
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = l.cfg.Prefix + k
	}
	if len(full) > 1 {
		return full, nil, nil
	}
	plan, yield := l.notify.Plan(full[0])
	if yield {
		return nil, nil, fmt.Errorf("dlock: acquire %q: %w (this Locker's release just woke the longest waiter, which goes first)", display, dlock.ErrNotAcquired)
	}
	return full, plan, nil
}

// sendRound sends the attempt to every node, each node's after this
// Locker's release of the same keys returned there (releasingOn), and
// returns at once. The wake-up queueing and the holder record go in the
// attempt's round trip; a node's first attempt probes it first.
func (l *Locker) sendRound(ctx context.Context, t *try) *inflight[*nodeReply] {
	timeout := l.timeout(t.TTL)
	s := sending{timeout: timeout, after: l.releasingOn(t.Keys), giveUp: true, progress: newProgress(len(l.nodes))}
	return send(ctx, l, s, func(ctx context.Context, i int, n *node) *nodeReply {
		if context.Cause(ctx) == errBehind {
			return &nodeReply{err: errBehind}
		}
		if !n.probed.Load() {
			l.probe(ctx, n) // before the node's first attempt
		}
		a := t.Attempt
		a.Queue, a.QueueArgs = t.plan.Queue(i)
		r := &nodeReply{}
		var err error
		if t.Sem != "" {
			r.AcquireResult, _, err = n.Permit(ctx, a)
		} else {
			r.AcquireResult, _, err = n.Acquire(ctx, a)
		}
		switch {
		case err != nil:
			r = &nodeReply{err: l.nodeErr(err, timeout)}
		case r.Status == rnode.Widen:
			r = &nodeReply{err: errors.New("the limit changed while this attempt read the semaphore")}
		}
		if r.err == nil {
			t.plan.Observe(i, r.Status != rnode.Granted, r.Place, r.Expiry)
		} else {
			t.plan.Lost(i) // it may have queued the Locker
		}
		return r
	})
}

// probe asks node n, in one round trip, for its run_id (two nodes may be
// one server) and its eviction policy, and warns about the policy the
// first time it reads a run_id. Once the server answered, even with a
// refusal, it is not asked again.
func (l *Locker) probe(ctx context.Context, n *node) {
	p := n.Client.Pipeline()
	info, policy := p.Info(ctx, "server"), p.ConfigGet(ctx, "maxmemory-policy")
	_, _ = p.Exec(ctx)
	var refused redis.Error
	if info.Err() == nil || errors.As(info.Err(), &refused) {
		n.probed.Store(true)
	}
	if run := runID(info.Val()); run != "" && n.run.CompareAndSwap(nil, &run) {
		rclient.WarnEviction(l.cfg.Logger, n.Name, policy.Val()["maxmemory-policy"])
	}
}

// runID reads run_id from the reply of INFO server.
func runID(info string) string {
	_, after, ok := strings.Cut(info, "run_id:")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(after, "\n")
	return strings.TrimSuffix(id, "\r")
}

// awaitMajority takes replies until a majority has granted, and returns
// their largest fence without waiting for the others (the grant orders its
// later requests after them). Until every node has answered with a run_id
// of its own it returns false at once: the caller then waits for every
// reply, so that one server behind two clients never counts twice.
func (l *Locker) awaitMajority(c *inflight[*nodeReply]) (int64, bool) {
	if !l.distinct.Load() {
		return 0, false
	}
	var fence int64
	granted := 0
	for c.left > 0 {
		r := c.out[c.next(nil)]
		if r.granted() {
			granted++
			fence = max(fence, r.Fence)
		}
		if granted >= l.quorum {
			return fence, true
		}
	}
	return 0, false
}

// maxSplitRetries bounds one TryAcquire's rounds after split votes.
const maxSplitRetries = 6

// fail releases a failed attempt on every node and returns its error,
// with what each node answered.
func (l *Locker) fail(ctx context.Context, t *try, replies []*nodeReply, sentinel error, reason string) error {
	l.releaseEverywhere(ctx, t)
	qe := &QuorumError{Op: "acquire", Need: l.quorum, Reason: reason, sentinel: sentinel}
	for i, r := range replies {
		nr := NodeResult{Node: l.nodes[i].Name, OK: r.granted(), Err: r.err}
		switch {
		case r.err != nil:
		case r.Status == rnode.Busy || r.Status == rnode.LeftToQueue:
			nr.Err = errBusy
		case r.Status == rnode.NoExpiry:
			nr.Err = fmt.Errorf("%w, and the key has no expiry (set by hand?)", errBusy)
		case r.Status == rnode.Conflict:
			nr.Err = fmt.Errorf("limit conflict: the node has %d", r.Fence)
		}
		if nr.OK {
			qe.Got++
		}
		qe.Nodes = append(qe.Nodes, nr)
	}
	l.misconfigured(qe)
	if cerr := ctx.Err(); cerr != nil && qe.sentinel != dlock.ErrMisconfigured {
		qe.sentinel = dlock.ErrNotAcquired
		return fmt.Errorf("dlock: acquire %q: %w: %w", t.display, qe, cerr)
	}
	return fmt.Errorf("dlock: acquire %q: %w", t.display, qe)
}

// splitVote reports whether no other owner can hold a majority: even with
// every silent node on its side, no holder the refusing nodes name reaches
// a quorum. The attempt then lost only to contenders of the same moment.
func (l *Locker) splitVote(replies []*nodeReply) bool {
	silent := 0
	holders := map[string]int{}
	for _, r := range replies {
		switch {
		case r.err != nil || r.Status == rnode.Conflict: // a conflict may hide a holder
			silent++
		case r.Status == rnode.Busy || r.Status == rnode.NoExpiry:
			holders[r.Holder]++
		}
	}
	if len(holders) == 0 {
		return false // nobody else holds anything: too few nodes answered
	}
	for _, n := range holders {
		if n+silent >= l.quorum {
			return false
		}
	}
	return true
}

// dedupe makes the replies of a server that an earlier node already is
// (same run_id) failures, or, in strict mode, returns an error. Once every
// node has a run_id of its own, attempts return on a majority's grants.
func (l *Locker) dedupe(replies []*nodeReply) error {
	seen := map[string]int{}
	for i, r := range replies {
		p := l.nodes[i].run.Load()
		if p == nil {
			continue
		}
		run := *p
		j, dup := seen[run]
		if !dup {
			seen[run] = i
			continue
		}
		if l.strict {
			return bridge.Invalidf("nodes %s and %s are the same server (run_id %s)", l.nodes[j].Name, l.nodes[i].Name, run)
		}
		if l.nodes[i].dupOf.Swap(int32(j+1)) == 0 {
			l.cfg.Logger.Warn("dlock/redlock: two nodes are the same server; it votes once", "node", l.nodes[i].Name, "same_as", l.nodes[j].Name, "run_id", run)
		}
		if r.err == nil {
			r.err = fmt.Errorf("same server as node %s (run_id %s): its vote does not count twice", l.nodes[j].Name, run)
		}
	}
	if len(seen) == len(l.nodes) {
		l.distinct.Store(true)
	}
	return nil
}

// readFence returns, for a release or extension by token, a fence at least
// the lock's: the largest of every node's counters and clock, plus the
// fence TTL when some node did not answer (case 1 of docs/fences.md); with
// no answer at all, an error matching dlock.ErrUnavailable.
func (l *Locker) readFence(ctx context.Context, full []string) (int64, error) {
	counters := keys.Fences(full)
	fences := make([]int64, len(l.nodes)) // each node's largest, read before it answers
	errs := send(ctx, l, sending{timeout: l.nodeTimeout}, func(ctx context.Context, i int, n *node) error {
		p := n.Client.Pipeline()
		vs, now := p.MGet(ctx, counters...), p.Time(ctx)
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		fences[i] = now.Val().UnixMicro() + n.ClockOffset
		for _, v := range vs.Val() {
			s, _ := v.(string)
			if x, err := strconv.ParseInt(s, 10, 64); err == nil {
				fences[i] = max(fences[i], x)
			}
		}
		return nil
	}).all()
	f := slices.Max(fences)
	all, some, refused := true, false, 0
	var last *dlock.NodeError
	for i, err := range errs {
		all, some = all && err == nil, some || err == nil
		if isRefusal(err) {
			refused, last = refused+1, &dlock.NodeError{Node: l.nodes[i].Name, Err: rclient.Describe(err)}
		}
	}
	switch {
	case l.tooMany(refused):
		return 0, fmt.Errorf("%w: %d nodes refused the read of the lock's fence: %w", dlock.ErrMisconfigured, refused, last)
	case !some:
		return 0, l.withCtx(ctx, fmt.Errorf("no node answered the read of the lock's fence: %w", dlock.ErrUnavailable))
	}
	if !all {
		f += l.cfg.FenceTTL.Microseconds()
	}
	return f, nil
}

var errBusy = errors.New("held by another owner")
