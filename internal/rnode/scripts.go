package rnode

// The Lua scripts of the protocol, for one key or several, run by SHA with
// EVAL on NOSCRIPT. The waiter queue's functions (queue.lua) are put in
// front of the scripts that queue a waiter: scripts cannot load one another.

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rclient"
)

//go:embed *.lua
var lua embed.FS

var (
	// Each .lua file says what its script takes and returns.
	AcquireScript   = load("queue", "acquire")
	ReleaseScript   = load("release")
	extendScript    = load("extend")
	wakeScript      = load("wake") // after DELEX
	semaphoreScript = load("queue", "semaphore")
	semLimitScript  = load("semlimit")
	holderScript    = load("holder")
)

// hashArgs holds the SHA of each script, boxed once for Cmd: one
// allocation less per call.
var hashArgs = map[*redis.Script]any{}

// load returns the script of the named files, one after the other.
func load(files ...string) *redis.Script {
	var src []byte
	for _, f := range files {
		b, err := lua.ReadFile(f + ".lua")
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		src = append(src, b...)
	}
	s := redis.NewScript(string(src))
	hashArgs[s] = s.Hash()
	return s
}

// releaseReply reads the release script's reply: the number of keys
// deleted, and of waiters woken.
func releaseReply(v any, err error) (deleted, woken int64, _ error) {
	if err != nil {
		return 0, 0, err
	}
	if n, ok := v.(int64); ok {
		return n, 0, nil
	}
	if v, ok := v.([]any); ok && len(v) == 2 {
		n, ok1 := v[0].(int64)
		w, ok2 := v[1].(int64)
		if ok1 && ok2 {
			return n, w, nil
		}
	}
	return 0, 0, fmt.Errorf("unexpected reply %v from the release script", v)
}

// Statuses of an attempt (AcquireResult.Status).
const (
	Busy        = 0  // another owner holds a key
	Granted     = 1  // the lock is the caller's
	NoExpiry    = -1 // another owner holds a key that never expires (set by hand?)
	LeftToQueue = 2  // free, but left to the queue's head (the caller's own release woke it)
	Conflict    = 3  // a semaphore whose servers recorded another limit
	Widen       = 4  // a semaphore with more slots that may be held than were given
)

// semaphoreReply reads the semaphore script's reply (semaphore.lua).
func semaphoreReply(reply any) (AcquireResult, error) {
	v, _ := reply.([]any)
	var r AcquireResult
	ok := len(v) == 5
	for i, p := range []*int64{&r.Status, &r.Fence, &r.Expiry, &r.Place, &r.Slot} {
		if !ok {
			break
		}
		if s, isStr := v[i].(string); isStr && i == 1 && (s == "" || r.Status == Busy) {
			r.Holder = s // no fence: busy
			continue
		}
		*p, ok = v[i].(int64)
	}
	if !ok || r.Status == Granted && (r.Fence <= 0 || r.Slot < 0) {
		return AcquireResult{}, fmt.Errorf("unexpected reply %v from the semaphore script", reply)
	}
	return r, nil
}

// semaphoreKeys returns the semaphore script's keys for the semaphore sem
// (its slot keys' prefix): the limit record, the waiter queue, n slot keys
// and their fence counters.
func semaphoreKeys(sem string, n int) []string {
	ks := make([]string, 2+2*n)
	ks[0], ks[1] = keys.Limit(sem), keys.Queue(sem)
	for i := range n {
		slot := sem + strconv.Itoa(i)
		ks[2+i], ks[2+n+i] = slot, keys.Fence(slot)
	}
	return ks
}

// AcquireResult is the acquire or the semaphore script's reply.
type AcquireResult struct {
	Status int64
	Fence  int64  // when Granted; a semaphore's recorded limit (Conflict) or span (Widen)
	Holder string // the token that made the server refuse, when busy (a semaphore: on one slot)
	Expiry int64  // ms until the busy key expires (0 when LeftToQueue), when the caller heads the queue; else -1
	Place  int64  // the caller's place in the queue; 0: not queued
	Slot   int64  // a permit's slot, when Granted
}

// acquireReply reads the acquire script's reply (acquire.lua).
func acquireReply(reply any) (AcquireResult, error) {
	if s, ok := reply.(string); ok {
		f, err := strconv.ParseInt(s, 10, 64)
		if err != nil || f <= 0 {
			return AcquireResult{}, fmt.Errorf("unexpected reply %q from the acquire script", s)
		}
		return AcquireResult{Status: Granted, Fence: f, Expiry: -1}, nil
	}
	v, _ := reply.([]any)
	var r AcquireResult
	var ok [4]bool
	if len(v) == 4 {
		r.Status, ok[0] = v[0].(int64)
		if r.Status == Granted {
			r.Fence, ok[1] = v[1].(int64)
		} else {
			r.Holder, ok[1] = v[1].(string)
		}
		r.Expiry, ok[2] = v[2].(int64)
		r.Place, ok[3] = v[3].(int64)
	}
	if ok != [4]bool{true, true, true, true} || (r.Status == Granted && r.Fence <= 0) {
		return AcquireResult{}, fmt.Errorf("unexpected reply %v from the acquire script", reply)
	}
	return r, nil
}

// run runs s over c, through b when b is not nil (Node.batch), with EVAL on
// NOSCRIPT. A call whose context ended before its reply has a
// *batch.LeftError as its command's error. key, if not nil, is keys[0]
// boxed (Boxed).
func run(ctx context.Context, b *batch.Batcher, c redis.Scripter, s *redis.Script, key any, keys []string, args []any) *redis.Cmd {
	if b == nil { // (the clones: keys and args stay on the caller's stack)
		return s.Run(ctx, c, slices.Clone(keys), slices.Clone(args)...)
	}
	cmd := Cmd(ctx, s, key, keys, args)
	err := b.Do(ctx, cmd)
	if left, ok := err.(*batch.LeftError); ok {
		c := redis.NewCmd(ctx) // cmd may still be in flight: not to be touched
		c.SetErr(left)
		return c
	}
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // it allocates, even for nil
		return s.Eval(ctx, c, slices.Clone(keys), slices.Clone(args)...)
	}
	return cmd
}

// Cmd returns an EVALSHA of s, not yet sent, for a sender that is not a
// go-redis Scripter (a batch); on NOSCRIPT, send s.Eval. args must be
// scalars. key, if not nil, is keys[0] boxed.
func Cmd(ctx context.Context, s *redis.Script, key any, keys []string, args []any) *redis.Cmd {
	hash, ok := hashArgs[s]
	if !ok {
		hash = s.Hash()
	}
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", hash, len(keys))
	for i, k := range keys {
		if i == 0 && key != nil {
			a = append(a, key)
			continue
		}
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// giveBackLate gives back keys, for token, when the reply of a call that
// left its batch comes, unless the reply, read by read, shows that nothing
// was taken: an error reply, or a readable one that is no grant.
func (n *Node) giveBackLate(ctx context.Context, left *batch.LeftError, read func(any) (AcquireResult, error),
	keys []string, token string, ttl time.Duration) {
	left.OnReply(func(cmd redis.Cmder) {
		c, ok := cmd.(*redis.Cmd)
		if !ok || rclient.IsReply(c.Err()) {
			return
		}
		if r, err := read(c.Val()); c.Err() == nil && err == nil && r.Status != Granted {
			return
		}
		n.GiveBack(ctx, keys, token, ttl)
	})
}
