package dlock_test

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

// Acquire waits for a lock and returns its handle; Release lets it go.
// (The examples find Redis at $REDIS_ADDR; go-redis uses localhost:6379
// when it is empty.)
func ExampleAcquire() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	wait, cancel := context.WithTimeout(ctx, 5*time.Second) // how long to wait for the lock
	defer cancel()
	lock, err := dlock.Acquire(wait, locker, "report:daily", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("held:", lock.Held(), "fence > 0:", lock.Fence() > 0)
	// ... the work, passing lock.Fence() to the resource it writes ...
	fmt.Println("release:", lock.Release(ctx))
	fmt.Println("held after release:", lock.Held())
	// Output:
	// held: true fence > 0: true
	// release: <nil>
	// held after release: false
}

// Do holds the lock exactly as long as the function runs, extends it in
// the background, and cancels the function's context with cause
// ErrLockLost if the lock may be lost.
func ExampleDo() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	err = dlock.Do(ctx, locker, "invoice:4821", 10*time.Second, func(ctx context.Context) error {
		fence := dlock.LockFromContext(ctx).Fence()
		// ... read, compute ...
		if ctx.Err() != nil { // the lock may be lost: stop before the irreversible step
			return context.Cause(ctx)
		}
		fmt.Println("posting with fence > 0:", fence > 0)
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// posting with fence > 0: true
	// Do: <nil>
}

// Every error matches exactly one sentinel: busy, gone, lost, unreachable
// or a bad argument.
func Example_errors() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lock, err := locker.TryAcquire(ctx, "job:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	describe := func(err error) string {
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, dlock.ErrNotAcquired):
			return "busy: someone else holds it"
		case errors.Is(err, dlock.ErrNotHeld):
			return "gone: your lock expired or was released"
		case errors.Is(err, dlock.ErrLockLost):
			return "lost: stop before the next irreversible step"
		case errors.Is(err, dlock.ErrUnavailable):
			return "unreachable: the outcome may be unknown"
		case errors.Is(err, dlock.ErrInvalid):
			return "invalid: " + err.Error()
		}
		return "unexpected: " + err.Error()
	}
	_, err = locker.TryAcquire(ctx, "job:42", 10*time.Second)
	fmt.Println(describe(err))
	_, err = locker.TryAcquire(ctx, "job:42", -time.Second)
	fmt.Println(describe(err))

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	defer down.Close()
	nowhere, err := redislock.New(down)
	if err != nil {
		panic(err)
	}
	_, err = nowhere.TryAcquire(ctx, "job:42", 10*time.Second)
	fmt.Println(describe(err))
	// Output:
	// busy: someone else holds it
	// invalid: invalid argument: ttl -1s: must be positive
	// unreachable: the outcome may be unknown
}

// Lead runs the function while this process leads the election; the term
// number (the grant's fence) goes with every write, and returning resigns.
// Leader and Observe tell everyone else who leads, or that nobody does.
func ExampleLead() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	err = dlock.Lead(ctx, locker, "example:scheduler", 10*time.Second, func(ctx context.Context) error {
		term, _ := dlock.TermFromContext(ctx)
		fmt.Println("leading, term > 0:", term.Fence > 0)
		who, err := dlock.Leader(ctx, locker, "example:scheduler")
		fmt.Println("someone leads:", who.Led, err)
		return nil // resign
	}, dlock.WithIdentity("replica-1"))
	fmt.Println("Lead:", err)
	who, err := dlock.Leader(ctx, locker, "example:scheduler")
	fmt.Println(who, err)
	// Output:
	// leading, term > 0: true
	// someone leads: true <nil>
	// Lead: <nil>
	// nobody leads "example:scheduler" <nil>
}

// A Candidate campaigns in the background; IsLeader answers nil only
// while it leads, within its validity: a gocron v2 Elector, with
// gocron.NewScheduler(gocron.WithDistributedElector(candidate)).
func ExampleCampaign() {
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	candidate, err := dlock.Campaign(context.Background(), locker, "example:cron", 10*time.Second)
	if err != nil {
		panic(err)
	}
	for candidate.IsLeader(context.Background()) != nil { // a job runs only on the leader
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("leader")
	fmt.Println("resign:", candidate.Resign(context.Background()))
	fmt.Println("after resigning:", candidate.IsLeader(context.Background()))
	// Output:
	// leader
	// resign: <nil>
	// after resigning: dlock: not the leader of "example:cron": lock not acquired (resigned)
}

// A semaphore admits up to N holders of one name; each permit is a lock on
// one of its slots, with its own fence.
func ExampleSemaphore() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	vendor := dlock.Semaphore(locker, 2) // the vendor allows two connections
	first, err := vendor.TryAcquire(ctx, "example:vendor-api", 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer first.Release(ctx)
	err = dlock.Do(ctx, vendor, "example:vendor-api", 30*time.Second, func(ctx context.Context) error {
		permit := dlock.LockFromContext(ctx)
		fmt.Println("inside on slot", permit.Slot(), "with key", permit.Key())
		_, err := vendor.TryAcquire(ctx, "example:vendor-api", 30*time.Second)
		fmt.Println("a third:", errors.Is(err, dlock.ErrNotAcquired))
		return nil // ... call the vendor, passing permit.Fence() ...
	})
	fmt.Println("Do:", err)
	fmt.Println("the first on slot", first.Slot())
	// Output:
	// inside on slot 1 with key {example:vendor-api}#1
	// a third: true
	// Do: <nil>
	// the first on slot 0
}
