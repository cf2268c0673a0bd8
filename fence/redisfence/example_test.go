package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/redislock"
)

// A fenced read-modify-write of a counter kept in Redis, under a lock. It
// needs a Redis server on localhost:6379, so it has no checked output.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	guard, err := redisfence.New(rdb)
	if err != nil {
		panic(err)
	}

	err = dlock.Do(ctx, locker, "lock:visits", 5*time.Second, func(ctx context.Context) error {
		lock := dlock.LockFromContext(ctx)
		// Read registers the fence: from here on, holders with older
		// fences cannot write, even if their write arrives before ours.
		v, _, err := guard.Read(ctx, "visits", lock.Fence(), lock.Token())
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(v)
		return guard.Write(ctx, "visits", lock.Fence(), lock.Token(), strconv.Itoa(n+1))
	})
	switch {
	case errors.Is(err, fence.ErrStale):
		fmt.Println("a newer holder got there first; nothing written")
	case err != nil:
		fmt.Println("error:", err)
	}
}
