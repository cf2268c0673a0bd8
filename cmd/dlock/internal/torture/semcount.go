package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/bridge"
)

// semCount is the negative control ControlSemCount: a semaphore on
// Redlock that counts the holders on each node (a sorted set of tokens
// scored by their expiry on the node's clock, as redis-semaphore's
// Redlock variant does) and holds a permit once a majority of nodes
// counted it below the limit. Each node's count respects the limit, yet
// the majorities need not overlap in a holder: with 3 nodes and a limit
// of 2, holders granted on nodes {1,2}, {2,3} and {3,1} are three.
type semCount struct {
	nodes  []*redis.Client
	prefix string
	limit  int
}

func perNodeSemaphore(nodes []*redis.Client, prefix string, limit int) dlock.Locker {
	return &semCount{nodes: nodes, prefix: prefix, limit: limit}
}

// KEYS[1] the holders, KEYS[2] the fence counter; ARGV token, ttl ms,
// limit. Returns the fence, or 0 when the node counts limit holders.
var semCountAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return redis.call('INCR', KEYS[2])
`)

// KEYS[1] the holders; ARGV token, ttl ms. Returns 1 when extended.
var semCountExtend = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
`)

func (s *semCount) keys(name string) []string {
	return []string{s.prefix + "semcount:{" + name + "}", s.prefix + "semcount:{" + name + "}:fence"}
}

// oneByOne runs f on every node, one after the other in a random order (a
// client asking the nodes in turn), and returns how many succeeded. Racing
// attempts that start on different nodes fill them in different orders.
func (s *semCount) oneByOne(f func(c *redis.Client) bool) int {
	n := 0
	for _, i := range rand.Perm(len(s.nodes)) {
		if f(s.nodes[i]) {
			n++
		}
	}
	return n
}

// each runs f on every node at once and returns how many succeeded.
func (s *semCount) each(f func(c *redis.Client) bool) int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := 0
	for _, c := range s.nodes {
		wg.Go(func() {
			if f(c) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return n
}

func (s *semCount) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	keys, token, ms := s.keys(name), bridge.NewToken(), bridge.Milliseconds(ttl)
	start := time.Now()
	var fence int64
	got := s.oneByOne(func(c *redis.Client) bool {
		nctx, cancel := context.WithTimeout(ctx, ttl/10)
		defer cancel()
		f, err := semCountAcquire.Run(nctx, c, keys, token, ms, s.limit).Int64()
		if err != nil || f == 0 {
			return false
		}
		fence = max(fence, f)
		return true
	})
	until := bridge.ValidUntil(start, ttl, bridge.DefaultDriftFactor)
	g := &semCountGrant{s: s, keys: keys, token: token}
	if got < len(s.nodes)/2+1 || !until.After(time.Now()) {
		g.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("dlock: acquire %q: %w (%d of %d nodes counted it in)", name, dlock.ErrNotAcquired, got, len(s.nodes))
	}
	return driver.NewPermit(name, 0, token, uint64(fence), until, g), nil
}

type semCountGrant struct {
	s     *semCount
	keys  []string
	token string
}

func (g *semCountGrant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	start := time.Now()
	got := g.s.each(func(c *redis.Client) bool {
		ok, err := semCountExtend.Run(ctx, c, g.keys[:1], g.token, bridge.Milliseconds(ttl)).Int64()
		return err == nil && ok == 1
	})
	if got < len(g.s.nodes)/2+1 {
		return time.Time{}, fmt.Errorf("%w (%d of %d nodes still count it)", dlock.ErrNotHeld, got, len(g.s.nodes))
	}
	return bridge.ValidUntil(start, ttl, bridge.DefaultDriftFactor), nil
}

func (g *semCountGrant) Release(ctx context.Context) error {
	g.s.each(func(c *redis.Client) bool { return c.ZRem(ctx, g.keys[0], g.token).Err() == nil })
	return nil
}
