package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/holder"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/scripts"
)

// WithHolderInfo makes the Locker publish who holds each of its locks, for
// Inspect, `dlock inspect` and dlock.Leader: a JSON record {"host", "pid",
// "service", "since", "token"} (the grant's token, so that a reader can
// tell it from a record an earlier holder left behind) in the key
// "dlock:holder:{key}", written in the same round trip as the grant (only
// if the grant is this Locker's), given the lock's TTL at each extension,
// and deleted with the release (where it is still this lock's record). The record is informational only: the lock key and its
// token decide who holds the lock. service names the program (it may be
// empty). The default is off: nothing is written beside the lock.
//
// Its cost: one more script in the grant's and in the release's round trip.
// An uncontended TryAcquire+Release cycle (BenchmarkHolderInfo, loopback
// redis-server, scripts path, a loaded 2-core machine) took 176-336µs and
// 35 allocations without it, 210-318µs and 79 allocations with it.
func WithHolderInfo(service string) Option {
	return func(l *Locker) error { return l.cfg.SetHolderInfo(service) }
}

// acquireScript runs the acquire script and, with WithHolderInfo, the
// holder record's write after it in the same round trip (the term record
// of an election's grant: see ReadTerm), as one try (oneTry); it returns
// the acquire script's reply and the record written ("" when none).
func (l *Locker) acquireScript(ctx context.Context, ks []string, args []any, token string, ttl time.Duration) (any, string, error) {
	rec := holder.Grant(l.cfg.HolderHead, time.Now(), driver.Identity(ctx), token)
	ctx, cancel := l.oneTry(ctx)
	defer cancel()
	if rec == "" {
		cmd := l.run(ctx, scripts.Acquire, ks, args)
		if left, ok := cmd.Err().(*batch.LeftError); ok {
			// The attempt may be granted after its caller gave up on it:
			// then give the key back.
			left.OnReply(func(cmd redis.Cmder) {
				if scripts.MayHaveTaken(cmd) {
					l.cleanup(ctx, ks[0], token, ttl)
				}
			})
		}
		v, err := cmd.Result()
		return v, "", err
	}
	res := scripts.Pipelined(ctx, l.client, append([]scripts.Call{{Script: scripts.Acquire, Keys: ks, Args: args}},
		scripts.WriteHolders(ks[:1], token, rec, ttl)...)...)
	v, err := res[0].Result()
	return v, rec, err
}

// extendHolder gives the holder record the lock's new TTL (best effort:
// the record is informational).
func (g *grant) extendHolder(ctx context.Context, ttl time.Duration) {
	if g.holder == "" {
		return
	}
	w := scripts.WriteHolders([]string{g.key}, g.token, g.holder, ttl)[0]
	_ = w.Script.Run(ctx, g.l.client, w.Keys, w.Args...).Err()
}

// releaseHolder releases the lock (as release does, waking the longest
// waiter) and deletes its holder record where it is still this lock's, in
// one round trip.
func (l *Locker) releaseHolder(ctx context.Context, key, token, rec string) (deleted, woken int64, err error) {
	res := scripts.Pipelined(ctx, l.client,
		scripts.Call{Script: scripts.Release, Keys: []string{key, keys.Queue(key)}, Args: []any{token}},
		scripts.DropHolders([]string{key}, rec))
	return scripts.ReleaseReply(res[0].Result())
}
