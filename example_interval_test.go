package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/redislock"
)

// reports is the resource the interval job writes: at most one report per
// tick, and every write fenced, so that a holder paused past its lock
// cannot write after the next one.
type reports struct {
	guard *fence.Memory // in production: the database's own check (package fence/pgfence)
	mu    sync.Mutex
	done  map[string]uint64 // tick -> the fence of the write that made its report
}

// runReport is what every replica runs at every tick. The lock's key names
// the tick, so that a slow run does not make the next tick's run skip; one
// try (busy: another replica runs it now, skip); the report is written
// with the lock's fence, and only if the tick has none yet (a replica
// whose timer fired after the first run ended gets the lock, and finds the
// report there).
func runReport(ctx context.Context, locker dlock.Locker, store *reports, tick time.Time) (wrote bool, err error) {
	key := "report:" + tick.UTC().Format("2006-01-02T15:04")
	err = dlock.Do(ctx, locker, key, time.Minute, func(ctx context.Context) error {
		lock := dlock.LockFromContext(ctx)
		// ... compute the report, checking ctx.Err() before each step ...
		return store.guard.Write(key, lock.Fence(), lock.Token(), func() error {
			store.mu.Lock()
			defer store.mu.Unlock()
			if _, exists := store.done[key]; exists {
				return nil
			}
			store.done[key], wrote = lock.Fence(), true
			return nil
		})
	}, dlock.WithRetryCount(0))
	if errors.Is(err, dlock.ErrNotAcquired) {
		return false, nil // another replica runs this tick
	}
	return wrote, err
}

// A job that runs once per interval across replicas: three replicas fire
// at the same tick and one writes the report; a fourth, whose timer fired
// late, finds it written.
func Example_oncePerInterval() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	store := &reports{guard: fence.NewMemory(), done: map[string]uint64{}}
	tick := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for range 3 { // the replicas
		wg.Go(func() {
			if _, err := runReport(ctx, locker, store, tick); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("reports for 10:00:", len(store.done))

	wrote, err := runReport(ctx, locker, store, tick) // the late replica
	fmt.Println("the late replica wrote:", wrote, err)
	// Output:
	// reports for 10:00: 1
	// the late replica wrote: false <nil>
}
