package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/scripts"
)

// nodeReply is one node's answer to the acquire (or read) script.
type nodeReply struct {
	err    error  // no answer, or a server error
	status int64  // 1 granted, 0 busy, -1 busy without expiry, 2 read only
	run    string // the server's run_id
	epoch  string // the node marker's epoch ("" without marker or rule)
	marker string // "ok", "none", "reset", "off"
	trust  string // "all" or "own"
	holder string // the token that made the node refuse
	n      []int64
	flag   []int64 // per key: 2 trusted and incremented, 1 trusted, 0 untrusted
}

func (r *nodeReply) granted() bool { return r.err == nil && r.status == 1 }

// trusted reports whether the node's counter for every key can count toward
// the fence majority.
func (r *nodeReply) trusted() bool {
	if r.err != nil {
		return false
	}
	for _, f := range r.flag {
		if f == 0 {
			return false
		}
	}
	return true
}

// current reports whether the node's counters already equal fence and are
// trusted, so no write-back is needed.
func (r *nodeReply) current(fence int64) bool {
	if r.err != nil {
		return false
	}
	for i, f := range r.flag {
		if f != 2 || r.n[i] != fence {
			return false
		}
	}
	return true
}

// candidate is the smallest fence this node's counters allow: a counter the
// acquisition incremented is already a new value; any other must be passed.
func (r *nodeReply) candidate() int64 {
	var c int64
	if r.err != nil {
		return 0
	}
	for i, n := range r.n {
		if r.flag[i] != 2 {
			n++
		}
		c = max(c, n)
	}
	return c
}

func (l *Locker) rule() string {
	if l.amnesiaRule {
		return "1"
	}
	return "0"
}

// round runs the acquire script on every node in mode ("acquire" or
// "read") and returns every node's reply.
func (l *Locker) round(ctx context.Context, lockKeys, counters []string, token string, ttl time.Duration, mode string) []*nodeReply {
	return l.sendRound(ctx, lockKeys, counters, token, ttl, mode, nil).all()
}

// sendRound sends the acquire script to every node, each node's after the
// earlier fan-out after (when not nil) returned there, and returns at once.
func (l *Locker) sendRound(ctx context.Context, lockKeys, counters []string, token string, ttl time.Duration, mode string, after *progress) *inflight[*nodeReply] {
	ks := make([]string, 0, 1+2*len(lockKeys))
	ks = append(append(append(ks, MarkerKey), lockKeys...), counters...)
	ms := dlock.Milliseconds(ttl)
	timeout := l.timeout(ttl)
	var wp *waitPlan
	if mode == "acquire" && len(lockKeys) == 1 {
		wp = l.notify.plan(lockKeys[0]) // a local Acquire waits: queue for a wake-up (notify.go)
	}
	// A node whose marker must be renewed gets a new epoch: one random
	// value per round, which the script makes the node's own by appending
	// its run_id.
	epoch := dlock.NewToken()
	argv := scripts.RedlockAcquire.Argv(ks, token, ms, l.rule(), epoch, mode)
	// An acquisition may return before every node answered; its grant
	// then orders later requests after the late ones (progress).
	var p *progress
	if mode == "acquire" {
		p = newProgress(len(l.nodes))
	}
	return send(ctx, l, sending{timeout: timeout, after: after, giveUp: true, progress: p}, func(ctx context.Context, n *node) *nodeReply {
		if context.Cause(ctx) == errBehind {
			return &nodeReply{err: errBehind}
		}
		if wp != nil {
			v, err := l.notify.attempt(ctx, l.index(n), wp, lockKeys[0], token, argv)
			return l.reply(v, err, len(lockKeys), timeout)
		}
		v, err := scripts.RedlockAcquire.Run(ctx, n.client, &n.funcs, argv).Slice()
		return l.reply(v, err, len(lockKeys), timeout)
	})
}

// reply turns one node's answer to the acquire script (for m keys) into a
// nodeReply.
func (l *Locker) reply(v []any, err error, m int, timeout time.Duration) *nodeReply {
	if err != nil {
		return &nodeReply{err: l.nodeErr(err, timeout)}
	}
	r, err := parseReply(v, m)
	if err != nil {
		return &nodeReply{err: err}
	}
	return r
}

func parseReply(v []any, m int) (*nodeReply, error) {
	const head = 6
	if len(v) != head+2*m {
		return nil, fmt.Errorf("unexpected reply of %d elements from the acquire script", len(v))
	}
	r := &nodeReply{n: make([]int64, m), flag: make([]int64, m)}
	var ok [head + 1]bool
	r.status, ok[0] = v[0].(int64)
	r.run, ok[1] = v[1].(string)
	r.epoch, ok[2] = v[2].(string)
	r.marker, ok[3] = v[3].(string)
	r.trust, ok[4] = v[4].(string)
	r.holder, ok[5] = v[5].(string)
	ok[head] = true
	for i := range m {
		var a, b bool
		r.n[i], a = v[head+2*i].(int64)
		r.flag[i], b = v[head+1+2*i].(int64)
		ok[head] = ok[head] && a && b
	}
	for _, o := range ok {
		if !o {
			return nil, fmt.Errorf("unexpected reply %v from the acquire script", v)
		}
	}
	return r, nil
}

func (l *Locker) tryAcquire(ctx context.Context, keys []string, display string, ttl time.Duration) (*dlock.Lock, error) {
	if ctx == nil {
		return nil, dlock.Invalidf("nil context")
	}
	if err := l.checkTTL(ttl); err != nil {
		return nil, err
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = l.prefix + k
	}
	counters := fenceKeys(full)
	token := dlock.NewToken()

	var start time.Time
	var replies []*nodeReply
	for attempt := 0; ; attempt++ {
		start = time.Now()
		c := l.sendRound(ctx, full, counters, token, ttl, "acquire", l.releasingOn(full))
		if fence, ok := l.awaitMajority(c); ok {
			validUntil := dlock.ValidUntil(start, ttl, l.driftFactor)
			if time.Now().Before(validUntil) {
				return dlock.NewLock(display, token, uint64(fence), validUntil, &grant{l: l, keys: full, token: token, acquiring: c.progress}), nil
			}
			// No validity left: the general path below refuses it.
		}
		replies = c.all()
		if err := l.dedupe(replies); err != nil {
			l.releaseEverywhere(ctx, full, token)
			return nil, err
		}
		if l.count(replies, (*nodeReply).granted) >= l.quorum {
			break
		}
		if attempt >= maxSplitRetries || !l.splitVote(replies) || ctx.Err() != nil {
			answered := l.count(replies, func(r *nodeReply) bool { return r.err == nil })
			if answered < l.quorum {
				return l.fail(ctx, display, full, token, replies, dlock.ErrUnavailable, fmt.Sprintf("only %d nodes answered", answered))
			}
			return l.fail(ctx, display, full, token, replies, dlock.ErrNotAcquired, "")
		}
		// Nobody can hold a majority: the contenders split the vote. Undo
		// this attempt everywhere and try again after a random pause that
		// grows with each split, so one contender ends up alone.
		l.releaseEverywhere(ctx, full, token)
		base := max(time.Since(start), time.Millisecond)
		if !sleep(ctx, rand.N(base<<(attempt+1))) {
			return l.fail(ctx, display, full, token, replies, dlock.ErrNotAcquired, "")
		}
	}
	fail := func(sentinel error, reason string) (*dlock.Lock, error) {
		return l.fail(ctx, display, full, token, replies, sentinel, reason)
	}

	fence, reason := l.fence(ctx, full, counters, ttl, replies)
	if fence == 0 {
		return fail(ErrFenceUnavailable, reason)
	}
	if w := l.writeBack(ctx, full, counters, token, ttl, fence, replies); w < l.quorum {
		return fail(dlock.ErrNotAcquired, fmt.Sprintf("the fence reached only %d nodes that still held the lock", w))
	}

	validUntil := dlock.ValidUntil(start, ttl, l.driftFactor)
	if elapsed := time.Since(start); !validUntil.After(start.Add(elapsed)) {
		return fail(dlock.ErrNotAcquired, fmt.Sprintf("the acquisition took %v: no validity left of ttl %v", elapsed.Round(time.Microsecond), ttl))
	}
	return dlock.NewLock(display, token, uint64(fence), validUntil, &grant{l: l, keys: full, token: token}), nil
}

// awaitMajority takes replies as they arrive until a majority of distinct
// servers has granted the lock in the steady state: every one of them
// incremented trusted counters to the same fence, the largest any answering
// node allows, so there is nothing to write back and no marker to place.
// It then returns that fence without waiting for the other nodes, whose
// replies arrive while the lock is held (the grant waits for them before
// it extends or releases). The fence is safe with only a majority heard:
// every earlier lock's fence is held by the counters of its own granting
// majority, which shares a node with this one, whose counter this grant
// incremented past it. Anything else (a refusal that leaves the outcome
// open, a node without marker, counters that differ, two nodes that are
// the same server, or a Locker that has not yet heard every node answer
// with a run_id of its own) waits for every reply and takes the general
// path.
func (l *Locker) awaitMajority(c *inflight[*nodeReply]) (int64, bool) {
	if !l.distinct.Load() {
		return 0, false // dedupe has not yet seen every node answer as itself
	}
	runs := make([]string, 0, len(l.nodes))
	for c.left > 0 {
		c.next()
		var fence int64
		for i, r := range c.out {
			if !c.got[i] {
				continue
			}
			if r.granted() && r.marker == "none" {
				return 0, false // the general path places the marker
			}
			fence = max(fence, r.candidate())
		}
		runs = runs[:0]
		ok := 0
		for i, r := range c.out {
			if !c.got[i] || r.err != nil {
				continue
			}
			if slices.Contains(runs, r.run) {
				return 0, false // one server behind two nodes: dedupe says so
			}
			runs = append(runs, r.run)
			if r.granted() && r.current(fence) {
				ok++
			}
		}
		if ok >= l.quorum {
			return fence, true
		}
	}
	return 0, false
}

// maxSplitRetries bounds how often one TryAcquire tries again after a split
// vote.
const maxSplitRetries = 6

// fail releases a failed attempt on every node and builds its error.
func (l *Locker) fail(ctx context.Context, display string, full []string, token string, replies []*nodeReply, sentinel error, reason string) (*dlock.Lock, error) {
	l.releaseEverywhere(ctx, full, token)
	qe := l.acquireError(replies, sentinel, reason)
	if cerr := ctx.Err(); cerr != nil {
		qe.sentinel = dlock.ErrNotAcquired
		return nil, fmt.Errorf("dlock: acquire %q: %w", display, errors.Join(qe, cerr))
	}
	return nil, fmt.Errorf("dlock: acquire %q: %w", display, qe)
}

func (l *Locker) count(replies []*nodeReply, pred func(*nodeReply) bool) int {
	n := 0
	for _, r := range replies {
		if pred(r) {
			n++
		}
	}
	return n
}

// splitVote reports whether no other owner can hold a majority: the nodes
// that refused name different holders, and even with every silent node on
// its side no single holder reaches N/2+1. Then the lock is free and the
// attempt lost only to other contenders of the same moment.
func (l *Locker) splitVote(replies []*nodeReply) bool {
	silent := 0
	holders := map[string]int{}
	for _, r := range replies {
		switch {
		case r.err != nil:
			silent++
		case r.status == 0 || r.status == -1:
			holders[r.holder]++
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

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// dedupe marks replies from a server that an earlier node already is (same
// run_id) as failures, so one machine never votes twice. In strict mode it is
// an error.
func (l *Locker) dedupe(replies []*nodeReply) error {
	seen := map[string]int{}
	for i, r := range replies {
		if r.err != nil || r.run == "" {
			continue
		}
		j, dup := seen[r.run]
		if !dup {
			seen[r.run] = i
			continue
		}
		if l.strict {
			return dlock.Invalidf("nodes %s and %s are the same server (run_id %s)", l.nodes[j].name, l.nodes[i].name, r.run)
		}
		if l.nodes[i].dupOf.Swap(int32(j+1)) == 0 {
			l.logger.Warn("dlock/redlock: two nodes are the same server; it votes once", "node", l.nodes[i].name, "same_as", l.nodes[j].name, "run_id", r.run)
		}
		r.err = fmt.Errorf("same server as node %s (run_id %s): its vote does not count twice", l.nodes[j].name, r.run)
	}
	if len(seen) == len(l.nodes) {
		l.distinct.Store(true)
	}
	return nil
}

func (l *Locker) acquireError(replies []*nodeReply, sentinel error, reason string) *QuorumError {
	qe := &QuorumError{Op: "acquire", Need: l.quorum, Reason: reason, sentinel: sentinel}
	for i, r := range replies {
		nr := NodeResult{Node: l.nodes[i].name, OK: r.granted(), Err: r.err}
		switch {
		case r.err != nil:
		case r.status == 0:
			nr.Err = errBusy
		case r.status == -1:
			nr.Err = fmt.Errorf("%w, and the key has no expiry (set by hand?)", errBusy)
		}
		if nr.OK {
			qe.Got++
		}
		qe.Nodes = append(qe.Nodes, nr)
	}
	return qe
}

// fence computes the lock's fence from the replies: the largest candidate
// over all nodes that answered, provided at least a majority of them have
// trusted counters for every key. When the granting round does not have that
// majority, or a granting node has no marker (both only after a node
// restarted empty, or on a new cluster), it gives marker-less nodes their
// marker and reads the counters of every node once more. It returns 0 and a
// reason when no safe fence exists.
func (l *Locker) fence(ctx context.Context, full, counters []string, ttl time.Duration, replies []*nodeReply) (int64, string) {
	fence, trusted := tallyFence(replies)
	unmarked := false
	for _, r := range replies {
		unmarked = unmarked || (r.granted() && r.marker == "none")
	}
	if trusted >= l.quorum && !unmarked {
		return fence, ""
	}
	// A granting node without a marker needs one before its counter can be
	// written back (and trusted again).
	if l.amnesiaRule {
		l.placeMarkers(ctx, ttl, replies, false)
	}
	reads := l.round(ctx, full, counters, "", ttl, "read")
	for i, r := range reads {
		if replies[i].err != nil || r.err != nil {
			continue // a node that did not answer the acquisition stays out
		}
		// Keep what the acquisition saw (an incremented counter) and take
		// the fresh trust and epoch from the read.
		replies[i].epoch, replies[i].marker, replies[i].trust = r.epoch, r.marker, r.trust
		for k := range r.n {
			if replies[i].flag[k] == 2 && r.flag[k] != 0 {
				continue
			}
			replies[i].flag[k] = r.flag[k]
			replies[i].n[k] = max(replies[i].n[k], r.n[k])
		}
	}
	fence, trusted = tallyFence(replies)
	if trusted >= l.quorum {
		return fence, ""
	}
	return 0, fmt.Sprintf("only %d nodes have trusted fence counters for the key; the others restarted without their data or did not answer (see Rejoin)", trusted)
}

func tallyFence(replies []*nodeReply) (fence int64, trusted int) {
	for _, r := range replies {
		if r.err != nil {
			continue
		}
		fence = max(fence, r.candidate())
		if r.trusted() {
			trusted++
		}
	}
	return fence, trusted
}

// placeMarkers gives every node that answered without a marker its marker:
// "all" (a missing counter is 0) when every node answered and none had one —
// a new cluster — and "own" (only counters written under the new epoch
// count) when other nodes have markers, which means this one lost its data.
//
// When some nodes did not answer and none of those that did has a marker,
// it cannot tell a new cluster from one whose answering nodes all lost their
// data, and places nothing (unless force: Reseed follows), so that the next
// attempt with every node answering can still recognise a new cluster.
func (l *Locker) placeMarkers(ctx context.Context, ttl time.Duration, replies []*nodeReply, force bool) {
	missing, marked, silent := 0, 0, 0
	for _, r := range replies {
		switch {
		case r.err != nil:
			silent++
		case r.marker == "none":
			missing++
		default:
			marked++
		}
	}
	var trust string
	switch {
	case missing == 0:
		return
	case marked == 0 && silent == 0:
		trust = "all"
	case marked > 0 || force:
		trust = "own"
	default:
		return
	}
	fanOut(ctx, l, l.timeout(ttl), func(ctx context.Context, n *node) error {
		r := replies[l.index(n)]
		if r.err != nil || r.marker != "none" {
			return nil
		}
		return scripts.RedlockMarker.Run(ctx, n.client, []string{MarkerKey}, dlock.NewToken(), trust, r.run).Err()
	})
}

func (l *Locker) index(n *node) int {
	for i, m := range l.nodes {
		if m == n {
			return i
		}
	}
	return -1
}

// writeBack makes sure every granting node holds the fence in trusted
// counters, writing it (set if greater, under the node's epoch, only while the
// node still holds the lock) where it does not yet. It returns how many
// granting nodes hold the fence afterwards. In the steady state every counter
// was incremented to the fence by the acquisition and nothing is sent.
func (l *Locker) writeBack(ctx context.Context, full, counters []string, token string, ttl time.Duration, fence int64, replies []*nodeReply) int {
	ks := make([]string, 0, 1+2*len(full))
	ks = append(append(append(ks, MarkerKey), full...), counters...)
	need := false
	for _, r := range replies {
		if r.granted() && !r.current(fence) {
			need = true
		}
	}
	if !need {
		held := 0
		for _, r := range replies {
			if r.granted() {
				held++
			}
		}
		return held
	}
	res := fanOut(ctx, l, l.timeout(ttl), func(ctx context.Context, n *node) bool {
		r := replies[l.index(n)]
		if !r.granted() {
			return false
		}
		if r.current(fence) {
			return true
		}
		if l.amnesiaRule && r.epoch == "" {
			return false // no marker (yet): nothing to tag the counter with
		}
		ok, err := scripts.RedlockWriteback.Run(ctx, n.client, ks, token, fence, l.rule(), r.epoch).Int64()
		return err == nil && ok == 1
	})
	held := 0
	for _, ok := range res {
		if ok {
			held++
		}
	}
	return held
}
