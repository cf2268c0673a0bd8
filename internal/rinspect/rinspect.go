// Package rinspect lists the locks held on a Redis server, for the Inspect
// methods of redislock and redlock and for `dlock inspect`.
package rinspect

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
)

// scanCount is each SCAN's COUNT hint: a call stays short however large
// the database.
const scanCount = 1000

// Scan lists, sorted, at most limit (> 0) held locks on one server whose
// keys, without prefix, match pattern (string keys with a TTL); dlock's
// own keys only if prefix+pattern starts with "dlock:".
func Scan(ctx context.Context, c redis.UniversalClient, node, prefix, pattern string, limit int) ([]dlock.LockInfo, error) {
	match := globQuoter.Replace(prefix) + pattern
	skipOwn := !strings.HasPrefix(prefix+pattern, keys.Reserved)
	seen := map[string]bool{}
	var rows []dlock.LockInfo
	var cursor uint64
	for {
		batch, next, err := c.ScanType(ctx, cursor, match, scanCount, "string").Result()
		if err != nil {
			return nil, err
		}
		var found []string
		for _, k := range batch {
			if !seen[k] && !(skipOwn && strings.HasPrefix(k, keys.Reserved)) && strings.HasPrefix(k, prefix) {
				seen[k] = true
				found = append(found, k)
			}
		}
		r, err := Describe(ctx, c, node, prefix, found) // none found: no round trip
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
		if len(rows) >= limit {
			return Sort(rows[:limit]), nil
		}
		if cursor = next; cursor == 0 {
			return Sort(rows), nil
		}
	}
}

// Describe reads, in one round trip, what a server knows of the locks on
// the keys ks (prefix included), leaving out those without a TTL (not
// locks) or gone.
func Describe(ctx context.Context, c redis.UniversalClient, node, prefix string, ks []string) ([]dlock.LockInfo, error) {
	type reply struct {
		ttl                  *redis.DurationCmd
		token, fence, holder *redis.StringCmd
		waiting              *redis.IntCmd
		limit                *redis.StringCmd // a permit's: its semaphore's record
	}
	replies := make([]reply, len(ks))
	p := c.Pipeline()
	for i, k := range ks {
		queue := keys.Queue(k)
		var limit *redis.StringCmd
		if sem, ok := bridge.SlotPrefixOf(k); ok {
			queue, limit = keys.Queue(sem), p.HGet(ctx, keys.Limit(sem), "limit")
		}
		replies[i] = reply{p.PTTL(ctx, k), p.Get(ctx, k), p.Get(ctx, keys.Fence(k)),
			p.Get(ctx, keys.Holder(k)), p.ZCard(ctx, queue), limit}
	}
	_, err := p.Exec(ctx)
	// A WRONGTYPE reply is a key beside a lock that is not dlock's (a
	// user's own key named like a fence counter): skipped, not an error.
	if err != nil && err != redis.Nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return nil, err
	}
	var rows []dlock.LockInfo
	for i, k := range ks {
		r := replies[i]
		ttl, err := r.ttl.Result()
		token, terr := r.token.Result()
		if err != nil || ttl <= 0 || terr != nil {
			continue // no expiry (not a lock), or gone since the scan
		}
		info := dlock.LockInfo{Key: strings.TrimPrefix(k, prefix), Node: node, TTL: ttl, Token: token, Majority: true}
		// A failed read's Val is empty: its field stays zero. On Redlock
		// the counter is this node's draw (the lock's fence is the largest).
		info.Fence, _ = strconv.ParseUint(r.fence.Val(), 10, 64)
		var h Record
		if json.Unmarshal([]byte(r.holder.Val()), &h) == nil {
			info.Host, info.PID, info.Service, info.Since = h.Host, h.PID, h.Service, h.Since
		}
		info.Waiting = int(r.waiting.Val())
		if r.limit != nil {
			info.Limit, _ = strconv.Atoi(r.limit.Val())
		}
		rows = append(rows, info)
	}
	return rows, nil
}

// Term is what one server knows of the holder of one lock key.
type Term struct {
	Token   string  // the lock key's value; "": nobody holds the key
	Counter uint64  // the key's fence counter (0: none)
	Record  *Record // the holder record, if its token is Token
}

// Record is the holder record of package holder, in keys.Holder(key).
type Record struct {
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Service  string    `json:"service,omitempty"`
	Since    time.Time `json:"since"`
	Identity string    `json:"identity,omitempty"`
	Token    string    `json:"token"`
	Fence    uint64    `json:"fence,omitempty"`
}

// Leader names the holder: the candidate's identity, else host:pid.
func (r *Record) Leader() string {
	if r.Identity != "" || r.Host == "" {
		return r.Identity
	}
	return r.Host + ":" + strconv.Itoa(r.PID)
}

// ReadTerm reads the lock key k (prefix included), its fence counter and
// its holder record in one transaction, and leaves out a record whose
// token is not the key's (an earlier holder's).
func ReadTerm(ctx context.Context, c redis.UniversalClient, k string) (Term, error) {
	p := c.TxPipeline()
	token, counter, rec := p.Get(ctx, k), p.Get(ctx, keys.Fence(k)), p.Get(ctx, keys.Holder(k))
	_, err := p.Exec(ctx)
	if err != nil && err != redis.Nil {
		return Term{}, err
	}
	var t Term
	if t.Token, err = token.Result(); err != nil && err != redis.Nil {
		return Term{}, err
	}
	if t.Token == "" {
		return Term{}, nil
	}
	if s, err := counter.Result(); err == nil {
		t.Counter, _ = strconv.ParseUint(s, 10, 64)
	}
	var r Record
	if s, err := rec.Result(); err == nil && json.Unmarshal([]byte(s), &r) == nil && r.Token == t.Token {
		t.Record = &r
	}
	return t, nil
}

// Sort orders rows by key, then node.
func Sort(rows []dlock.LockInfo) []dlock.LockInfo {
	slices.SortFunc(rows, func(a, b dlock.LockInfo) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Node, b.Node))
	})
	return rows
}

// globQuoter quotes the glob characters of a literal prefix.
var globQuoter = strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`, `\`, `\\`)
