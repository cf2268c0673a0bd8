package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/servers"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
)

// backend is one Locker under traffic, and how to make it lose a lock.
type backend struct {
	name   string
	locker dlock.Locker
	// lose ends the lock on key behind its holder's back.
	lose func(ctx context.Context, key string) error
}

// quiet is the backends' logger: the tool's own losses are not news.
var quiet = slog.New(slog.DiscardHandler)

// startBackends starts a redis-server for redislock, three for redlock
// and a PostgreSQL cluster for pglock, all under dir, with Lockers
// observed by observe; stop ends them.
func startBackends(ctx context.Context, dir string, observe func(context.Context, dlock.Event)) (bs []backend, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	var clients []*redis.Client
	for i := range 4 {
		r, err := servers.NewRedis(mkdir(dir, fmt.Sprint("redis", i)))
		if err != nil {
			return nil, stop, err
		}
		c := redis.NewClient(r.Options())
		stops = append(stops, r.Stop, func() { c.Close() })
		clients = append(clients, c)
	}
	rl, err := redislock.New(clients[0], redislock.WithLogger(quiet), redislock.WithObserver(observe))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { rl.Close() })
	nodes := []redis.UniversalClient{clients[1], clients[2], clients[3]}
	rdl, err := redlock.New(nodes, redlock.WithLogger(quiet), redlock.WithObserver(observe))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { rdl.Close() })
	del := func(cs ...*redis.Client) func(context.Context, string) error {
		return func(ctx context.Context, key string) error {
			for _, c := range cs {
				if err := c.Del(ctx, key).Err(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	bs = append(bs, backend{"redis", rl, del(clients[0])}, backend{"redlock", rdl, del(clients[1:]...)})
	pg, err := startPostgres(ctx, dir, observe, &stops)
	if err != nil {
		return nil, stop, err
	}
	return append(bs, pg), stop, nil
}

func startPostgres(ctx context.Context, dir string, observe func(context.Context, dlock.Event), stops *[]func()) (backend, error) {
	pg, err := servers.NewPostgres(mkdir(dir, "postgres"), servers.PostgresNoTemplate())
	if err != nil {
		return backend{}, err
	}
	*stops = append(*stops, pg.Stop)
	pool, err := pgxpool.NewWithConfig(ctx, pg.PoolConfig(16))
	if err != nil {
		return backend{}, err
	}
	*stops = append(*stops, pool.Close)
	if err := pglock.Migrate(ctx, pool); err != nil {
		return backend{}, err
	}
	l, err := pglock.New(pool, pglock.WithLogger(quiet), pglock.WithObserver(observe))
	if err != nil {
		return backend{}, err
	}
	*stops = append(*stops, func() { l.Close() })
	terminate := func(ctx context.Context, key string) error {
		infos, err := l.Inspect(ctx, key, 0)
		if err != nil || len(infos) != 1 {
			return fmt.Errorf("the session holding %s: %v (%d found)", key, err, len(infos))
		}
		return pg.Terminate(ctx, uint32(infos[0].PID))
	}
	return backend{"postgres", l, terminate}, nil
}

func mkdir(dir, name string) string {
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		panic(err)
	}
	return d
}

// traffic runs workers on every backend until ctx ends: each takes one of
// three keys through Do, waiting up to a second (so some give up), or
// tries once (so some are refused as busy), and holds it 5-150ms; now and
// then a lock is lost behind its holder's back.
func traffic(ctx context.Context, bs []backend) {
	var wg sync.WaitGroup
	for _, b := range bs {
		for w := range 3 {
			wg.Go(func() { worker(ctx, b, w) })
		}
		wg.Go(func() { loser(ctx, b) })
	}
	wg.Wait()
}

func worker(ctx context.Context, b backend, w int) {
	for ctx.Err() == nil {
		key := fmt.Sprintf("job:%c", 'a'+rand.IntN(3))
		var opts []dlock.Option
		if w == 0 {
			opts = append(opts, dlock.WithRetryCount(0)) // try once
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		hold := time.Duration(5+rand.IntN(145)) * time.Millisecond
		dlock.Do(wctx, b.locker, key, 2*time.Second, func(context.Context) error {
			time.Sleep(hold)
			return nil
		}, opts...)
		cancel()
		time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
	}
}

// loser holds a lock of its own every 15-30s and has it lost: its key
// deleted (Redis), its session terminated (PostgreSQL).
func loser(ctx context.Context, b backend) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(15+rand.IntN(15)) * time.Second):
		}
		err := dlock.Do(ctx, b.locker, "lost", time.Second, func(fctx context.Context) error {
			if err := b.lose(fctx, "lost"); err != nil {
				return err
			}
			<-fctx.Done()
			return nil
		})
		if err != nil && !errors.Is(err, dlock.ErrLockLost) && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "dashshot: %s: losing a lock: %v\n", b.name, err)
		}
	}
}
