// Package rnode is dlock's lock protocol on one Redis server, for
// redislock and redlock: the scripts, run through the node's batch, and
// the server's own commands where the node probes for them.
package rnode

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
)

// Node is one Redis server, or one deployment behind one client (a
// Cluster, a Sentinel group). It is safe for concurrent use.
type Node struct {
	Client redis.UniversalClient
	Name   string         // how errors name the server
	batch  *batch.Batcher // nil but on a single-node client
	// fenceTTL (ms) and lastTTL (the latest call's TTL: a Locker mostly
	// uses one) are boxed once for the scripts: an allocation less each.
	fenceTTL    any
	lastTTL     atomic.Pointer[ttlArg]
	ClockOffset int64         // µs added to the server's clock as the fence rule reads it; tests only
	giveBack    time.Duration // the bound of a give-back (GiveBack)

	logger  *slog.Logger                   // nil: no probe, the scripts only
	probing chan struct{}                  // held by the probe in progress (cap 1)
	native  atomic.Pointer[rclient.Native] // what the probe found; nil: not probed yet
}

// New returns the node behind c, whose give-backs take at most giveBack.
// With a logger it probes for the server's own commands on first use (and
// warns of an eviction policy there); without, it runs the scripts.
func New(c redis.UniversalClient, name string, fenceTTL, giveBack time.Duration, probe *slog.Logger) *Node {
	n := &Node{Client: c, Name: name, fenceTTL: fenceTTL.Milliseconds(), giveBack: giveBack, logger: probe,
		probing: make(chan struct{}, 1)}
	if one, ok := c.(*redis.Client); ok { // a Cluster or a Ring sends each command to a node of its own
		n.batch = batch.New(one)
	}
	return n
}

type ttlArg struct {
	ttl time.Duration
	ms  any
}

// ttlArg returns ttl in ms (bridge.Milliseconds), boxed for a script.
func (n *Node) ttlArg(ttl time.Duration) any {
	if t := n.lastTTL.Load(); t != nil && t.ttl == ttl {
		return t.ms
	}
	t := &ttlArg{ttl, bridge.Milliseconds(ttl)}
	n.lastTTL.Store(t)
	return t.ms
}

// BatchWaiting reports how many calls wait for the node's next batch.
func (n *Node) BatchWaiting() int { return n.batch.Waiting() }

// Attempt is one acquisition's arguments on a node: a lock's (Acquire) or
// a permit's (Permit: Sem, Limit and Slot instead of Keys and Holder).
type Attempt struct {
	Keys      []string // the lock keys (with any prefix)
	Token     string
	TTL       time.Duration
	Holder    string // the holder record to write beside each key ("": none)
	Queue     string // with QueueArgs, queue the caller for a wake-up (wake.Plan.Queue)
	QueueArgs []any
	Sem       string // the semaphore: its slot keys' prefix (with any prefix)
	Limit     int
	Slot      int // the one slot to try, from 0 (Redlock); -1: the lowest free one
}

// Acquire runs the acquire script (which writes the holder record too) and
// reads its reply. boxed is what it boxed, for the release. What a call
// left in flight was granted is given back (GiveBack).
func (n *Node) Acquire(ctx context.Context, a Attempt) (r AcquireResult, boxed Boxed, err error) {
	// On the stack, room for one key's keys and arguments: the command
	// copies them.
	var kb [4]string
	var ab [10]any
	ks := append(kb[:0], a.Keys...)
	for _, k := range a.Keys {
		ks = append(ks, keys.Fence(k))
	}
	args := append(ab[:0], a.Token, n.ttlArg(a.TTL), n.fenceTTL)
	if len(a.Keys) == 1 {
		boxed.Key = a.Keys[0]
	}
	if a.Queue != "" || a.Holder != "" || n.ClockOffset != 0 {
		args = append(args, n.ClockOffset)
	}
	if a.Holder != "" {
		for _, k := range a.Keys {
			ks = append(ks, keys.Holder(k))
		}
	}
	if a.Queue != "" {
		ks = append(ks, a.Queue)
		args = append(args, a.QueueArgs...)
	}
	if a.Holder != "" {
		for len(args) < 9 { // ARGV[5..9]: the queue's, if any
			args = append(args, "")
		}
		args = append(args, a.Holder)
	}
	cmd := run(ctx, n.batch, n.Client, AcquireScript, boxed.Key, ks, args)
	if left, ok := cmd.Err().(*batch.LeftError); ok {
		n.giveBackLate(ctx, left, acquireReply, a.Keys, a.Token, a.TTL)
	}
	v, err := cmd.Result()
	if err != nil {
		return r, Boxed{}, err
	}
	r, err = acquireReply(v)
	return r, Boxed{boxed.Key, args[0]}, err
}

// Permit runs the semaphore script for the permit p and reads its reply,
// over the slots that may be held (widen). slots are the last call's slot
// keys: after an error one may be p.Token's. A call that left in flight
// gives back every slot: releasing the others changes nothing.
func (n *Node) Permit(ctx context.Context, p Attempt) (r AcquireResult, slots []string, err error) {
	args := []any{p.Token, bridge.Milliseconds(p.TTL), n.fenceTTL, p.Limit, "", "", "", "", "", ""}
	copy(args[4:9], p.QueueArgs) // ARGV[5..9]: the queue's, if any
	if p.Slot >= 0 {
		args[9] = p.Slot
	}
	r, err = widen(p.Limit, func(span int) (AcquireResult, error) {
		ks := semaphoreKeys(p.Sem, span)
		slots = ks[2 : 2+span]
		v, err := run(ctx, n.batch, n.Client, semaphoreScript, nil, ks, args).Result()
		if left, ok := err.(*batch.LeftError); ok {
			n.giveBackLate(ctx, left, semaphoreReply, slots, p.Token, p.TTL)
		}
		if err != nil {
			return AcquireResult{}, err
		}
		return semaphoreReply(v)
	})
	return r, slots, err
}

// widen asks over span slots, and once more over the slots a Widen reply
// says may be held; a Widen it returns means the record moved again.
func widen(span int, ask func(span int) (AcquireResult, error)) (AcquireResult, error) {
	r, err := ask(span)
	if err == nil && r.Status == Widen && r.Fence > int64(span) && r.Fence <= bridge.MaxLimit {
		return ask(int(r.Fence))
	}
	return r, err
}

// Boxed is a lock's key and token as Acquire boxed them for its script,
// for the release: two allocations less.
type Boxed struct{ Key, Token any }

// Release is one release's arguments on a node.
type Release struct {
	Keys   []string
	Token  string
	Boxed  Boxed  // Keys[0] and Token as Acquire boxed them (zero: box them again)
	Holder string // the holder record to delete where it is still this one
	Fence  int64  // if not 0, first raise every counter below it (Redlock)
	Wake   bool   // wake the longest waiter of each key deleted
	Sem    string // a permit's semaphore, whose queue's head is woken
	// noProbe: use the server's own command only if a probe already found
	// it (a give-back's short bound leaves no time for a probe's round trip).
	noProbe bool
}

// Release deletes the keys that hold the token (and the holder records
// still rel.Holder) in one round trip, and counts the keys and waiters.
func (n *Node) Release(ctx context.Context, rel Release) (deleted, woken int64, err error) {
	one := len(rel.Keys) == 1 && rel.Fence == 0 && rel.Sem == ""
	if one && rel.Holder == "" {
		var nat rclient.Native
		if p := n.native.Load(); p != nil {
			nat = *p
		} else if !rel.noProbe {
			nat = n.Features(ctx)
		}
		if nat.Release != "" {
			return n.releaseNative(ctx, nat, rel.Keys[0], rel.Token, rel.Wake)
		}
	}
	var kb [4]string
	var ab [6]any
	ks := append(kb[:0], rel.Keys...)
	args := append(ab[:0], rel.Boxed.Token)
	if !one || rel.Boxed.Token == nil || rel.Holder != "" {
		args = append(ab[:0], rel.Token, len(rel.Keys), rel.Fence, n.fenceTTL)
	}
	if rel.Sem != "" || rel.Holder != "" {
		args = append(args, rel.Sem)
	}
	if rel.Holder != "" {
		args = append(args, rel.Holder)
	}
	if rel.Fence > 0 {
		ks = append(ks, keys.Fences(rel.Keys)...)
	}
	if rel.Wake && rel.Sem != "" {
		ks = append(ks, keys.Queue(rel.Sem))
	} else if rel.Wake {
		for _, k := range rel.Keys {
			ks = append(ks, keys.Queue(k))
		}
	}
	if rel.Holder != "" {
		for _, k := range rel.Keys {
			ks = append(ks, keys.Holder(k))
		}
	}
	var key any
	if one {
		key = rel.Boxed.Key
	}
	return releaseReply(run(ctx, n.batch, n.Client, ReleaseScript, key, ks, args).Result())
}

// GiveBack deletes whichever of keys holds token, in the background within
// ttl and the node's give-back bound, waking nobody: the lock was never
// held (a caller gave up on the attempt, or its grant came too late). A
// holder record expires with the lock's TTL.
func (n *Node) GiveBack(ctx context.Context, keys []string, token string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, n.giveBack))
	go func() {
		defer cancel()
		_, _, _ = n.Release(ctx, Release{Keys: keys, Token: token, noProbe: true})
	}()
}

// releaseNative deletes key with the server's own command and, with
// wakeUp, wakes its longest waiter in the same round trip.
func (n *Node) releaseNative(ctx context.Context, nat rclient.Native, key, token string, wakeUp bool) (deleted, woken int64, err error) {
	if !wakeUp {
		deleted, err = n.Client.Do(ctx, nat.ReleaseArgs(key, token)...).Int64()
		return deleted, 0, err
	}
	pipe := n.Client.Pipeline()
	del := pipe.Do(ctx, nat.ReleaseArgs(key, token)...)
	wakeKeys := []string{key, keys.Queue(key)}
	wake := wakeScript.EvalSha(ctx, pipe, wakeKeys)
	rclient.Exec(ctx, pipe)
	if err := wake.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && del.Err() == nil {
		wake = wakeScript.Run(ctx, n.Client, wakeKeys)
	}
	woken, _ = wake.Int64() // best effort: a lost wake-up is found by polling
	deleted, err = del.Int64()
	return deleted, woken, err
}

// Extend resets the TTL of keys if all of them still hold token, renews
// their fence counters when fence is known (raising them to it) and the
// holder records' (rec), in one round trip. A permit (sem: its semaphore,
// fence known) also raises its limit record's TTL to ttl. held is false
// when some key no longer holds token.
func (n *Node) Extend(ctx context.Context, lockKeys []string, token, rec, sem string, fence int64, ttl time.Duration) (held bool, err error) {
	if fence == 0 && rec == "" && len(lockKeys) == 1 && n.Features(ctx).SetIfEq {
		// SET IFEQ renews the key alone: only for a lock whose fence is
		// not known, where the script leaves the counter alone too.
		ms := bridge.Milliseconds(ttl)
		err := n.Client.SetIFEQ(ctx, lockKeys[0], token, token, time.Duration(ms)*time.Millisecond).Err()
		if err == redis.Nil {
			return false, nil
		}
		return err == nil, err
	}
	ks := append(make([]string, 0, 3*len(lockKeys)+1), lockKeys...)
	args := []any{token, n.ttlArg(ttl), fence, n.fenceTTL} // the counter's TTL is unused without a fence
	if fence > 0 {
		ks = append(ks, keys.Fences(lockKeys)...)
	}
	if rec != "" {
		for _, k := range lockKeys {
			ks = append(ks, keys.Holder(k))
		}
		args = append(args, rec)
	}
	if sem != "" {
		ks = append(ks, keys.Limit(sem))
	}
	v, err := run(ctx, n.batch, n.Client, extendScript, nil, ks, args).Int64()
	return v == 1, err
}

// WriteHolders writes rec beside each of lockKeys for ttl, each only while
// its key holds token, in one script (an election's term record, once its
// fence is known: the grant wrote the first record).
func (n *Node) WriteHolders(ctx context.Context, lockKeys []string, token, rec string, ttl time.Duration) error {
	ks := append(make([]string, 0, 2*len(lockKeys)), lockKeys...)
	for _, k := range lockKeys {
		ks = append(ks, keys.Holder(k))
	}
	return run(ctx, n.batch, n.Client, holderScript, nil, ks, []any{token, rec, bridge.Milliseconds(ttl)}).Err()
}

// SetLimit records limit as the limit of the semaphore sem (its slot keys'
// prefix) if one of its slots is held; recorded is false when none is.
func (n *Node) SetLimit(ctx context.Context, sem string, limit int) (recorded bool, err error) {
	r, err := widen(limit, func(span int) (AcquireResult, error) {
		ks := semaphoreKeys(sem, span)
		ks = append(ks[:1:1], ks[2:2+span]...) // the limit record and the slots
		v, err := run(ctx, n.batch, n.Client, semLimitScript, nil, ks, []any{limit}).Int64Slice()
		if err != nil || len(v) != 2 {
			return AcquireResult{}, err
		}
		return AcquireResult{Status: v[0], Fence: v[1]}, nil
	})
	if err == nil && r.Status == Widen {
		return false, errors.New("the limit changed while it was being set")
	}
	return r.Status == 1, err // semlimit.lua's 1: recorded
}

// Features reports the server's own commands, probed once with its
// eviction policy (none without a logger). A call waits for a probe in
// progress within ctx, else uses the scripts; a probe that got no answer
// is made again by the next call.
func (n *Node) Features(ctx context.Context) rclient.Native {
	if n.logger == nil {
		return rclient.Native{}
	}
	if nat := n.native.Load(); nat != nil {
		return *nat
	}
	select {
	case n.probing <- struct{}{}:
		defer func() { <-n.probing }()
	case <-ctx.Done():
		return rclient.Native{}
	}
	if nat := n.native.Load(); nat != nil {
		return *nat
	}
	nat, policy, ok := rclient.Probe(ctx, n.Client, "dlock:probe:"+bridge.NewToken())
	if !ok {
		return rclient.Native{} // unreachable now: use the scripts, probe again next time
	}
	n.native.Store(&nat)
	rclient.WarnEviction(n.logger, n.Name, policy)
	return nat
}

// SetFeatures makes the node use the native commands of nat as if its
// probe had found them; tests only.
func (n *Node) SetFeatures(nat rclient.Native) { n.native.Store(&nat) }
