package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
)

func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}

	lock, err := locker.TryAcquire(ctx, "example:payment", 30*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "example:payment", 30*time.Second)
	fmt.Println("second owner refused:", errors.Is(err, dlock.ErrNotAcquired))

	fmt.Println("release:", lock.Release(ctx))
	fmt.Println("release again is refused:", errors.Is(lock.Release(ctx), dlock.ErrNotHeld))
	// Output:
	// second owner refused: true
	// release: <nil>
	// release again is refused: true
}

func Example_do() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}

	// Do holds the lock exactly as long as the function runs, extending it
	// in the background, and releases it afterwards.
	err = dlock.Do(ctx, locker, "example:nightly-report", 5*time.Second, func(ctx context.Context) error {
		// ... work ...
		if ctx.Err() != nil {
			// The lock may be lost: stop before any irreversible step.
			return context.Cause(ctx)
		}
		fence := dlock.LockFromContext(ctx).Fence() // pass it to the resource
		fmt.Println("report written under the lock, fence > 0:", fence > 0)
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// report written under the lock, fence > 0: true
	// Do: <nil>
}

func ExampleLocker_TryAcquire_fence() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}

	a, err := locker.TryAcquire(ctx, "example:stock", 100*time.Millisecond)
	if err != nil {
		panic(err)
	}
	time.Sleep(200 * time.Millisecond) // A stalls past its TTL
	b, err := locker.TryAcquire(ctx, "example:stock", time.Second)
	if err != nil {
		panic(err)
	}
	defer b.Release(ctx)

	// The resource must reject writes carrying a fence below the highest
	// it has seen (see package fence).
	fmt.Println("B's fence is greater than A's:", b.Fence() > a.Fence())
	fmt.Println("A still believes it holds the lock:", a.Held())
	// Output:
	// B's fence is greater than A's: true
	// A still believes it holds the lock: false
}
