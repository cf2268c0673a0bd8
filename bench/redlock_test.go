package bench

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/redlock"
)

// BenchmarkB: one goroutine takes and releases a Redlock over five
// independent redis-servers, each implementation over five clients of its
// own.
func BenchmarkB(b *testing.B) {
	for _, impl := range redlocks {
		b.Run(impl.name, func(b *testing.B) { measure(b, impl.setup(b, redlockClients(b))) })
	}
}

// redlockClients returns a client for each of the five servers.
func redlockClients(b *testing.B) []*redis.Client {
	cs := make([]*redis.Client, len(redlockAddrs))
	for i, a := range redlockAddrs {
		cs[i] = newClient(b, a)
	}
	return cs
}

// redlocks are the Redlock cycles of BenchmarkB, the baseline first. raw:
// SET NX PX on every node in parallel, held when a majority said OK, then
// the compare-and-delete on every node in parallel, each round waiting for
// all five replies — the classic fan-out, with no fence and no validity
// bookkeeping. dlock's rounds return once a majority has answered.
var redlocks = []struct {
	name  string
	setup func(b *testing.B, cs []*redis.Client) cycleFunc
}{
	{"raw-fanout", func(b *testing.B, cs []*redis.Client) cycleFunc { return rawFanout(cs, freshKey("B")) }},
	{"dlock", func(b *testing.B, cs []*redis.Client) cycleFunc {
		return tryCycle(newRedlockOver(b, cs), freshKey("B"))
	}},
	{"redsync", func(b *testing.B, cs []*redis.Client) cycleFunc {
		pools := make([]redsyncredis.Pool, len(cs))
		for i, c := range cs {
			pools[i] = goredis.NewPool(c)
		}
		m := redsync.New(pools...).NewMutex(freshKey("B"), redsync.WithExpiry(ttl), redsync.WithTries(1))
		return func(ctx context.Context) error {
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			if ok, err := m.UnlockContext(ctx); !ok {
				return errors.Join(errBusy, err)
			}
			return nil
		}
	}},
}

// rawFanout is raw-fanout's cycle on key over cs.
func rawFanout(cs []*redis.Client, key string) cycleFunc {
	quorum := len(cs)/2 + 1
	return func(ctx context.Context) error {
		tok := token()
		var mu sync.Mutex
		var wg sync.WaitGroup
		granted := 0
		for _, c := range cs {
			wg.Go(func() {
				if ok, err := c.SetNX(ctx, key, tok, ttl).Result(); err == nil && ok {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, c := range cs {
			wg.Go(func() { _ = rawRelease.Run(ctx, c, []string{key}, tok).Err() })
		}
		wg.Wait()
		if granted < quorum {
			return errBusy
		}
		return nil
	}
}

// newRedlockOver returns dlock's Redlock over cs.
func newRedlockOver(b *testing.B, cs []*redis.Client) *redlock.Locker {
	ucs := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		ucs[i] = c
	}
	l, err := redlock.New(ucs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() }) // before the clients: lets the last release finish
	return l
}

// BenchmarkDB is D over Redlock: 64 goroutines, each on its own key, share
// the five servers' clients (and one Locker). Not in run.sh: a check of
// the group commit on each node (bench/RESULTS.md).
func BenchmarkDB(b *testing.B) {
	for _, impl := range []struct {
		name  string
		setup func(b *testing.B, cs []*redis.Client) func(key string) cycleFunc
	}{
		{"raw-fanout", func(b *testing.B, cs []*redis.Client) func(string) cycleFunc {
			return func(key string) cycleFunc { return rawFanout(cs, key) }
		}},
		{"dlock", func(b *testing.B, cs []*redis.Client) func(string) cycleFunc {
			l := newRedlockOver(b, cs)
			return func(key string) cycleFunc { return tryCycle(l, key) }
		}},
	} {
		b.Run(impl.name, func(b *testing.B) { onOwnKeys(b, "DB", impl.setup(b, redlockClients(b))) })
	}
}
