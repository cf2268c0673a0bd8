package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// Do over five independent masters: the function runs while a majority
// holds the lock, which is extended in the background and released after.
// The fence goes to the protected resource with every write.
func Example() {
	// Five independent masters, as host:port,... in $REDLOCK_ADDRS.
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}

	// The node timeout bounds each request to one node (default 50ms). The
	// examples run under go test -race on a busy machine, where a first
	// request (dial, handshake, script load) can take longer.
	locker, err := redlock.New(clients, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	var fences []uint64
	for range 2 {
		err = dlock.Do(ctx, locker, "invoice:4821", 10*time.Second, func(ctx context.Context) error {
			lock := dlock.LockFromContext(ctx)
			// Before every irreversible step: is the lock still ours?
			if ctx.Err() != nil {
				return context.Cause(ctx) // matches dlock.ErrLockLost
			}
			fences = append(fences, lock.Fence()) // ledger.Post(ctx, inv, lock.Fence())
			return nil
		})
		fmt.Println("billed invoice 4821:", err)
	}
	fmt.Println("the second holder's fence is greater:", fences[1] > fences[0])
	// Output:
	// billed invoice 4821: <nil>
	// billed invoice 4821: <nil>
	// the second holder's fence is greater: true
}

// A quorum error says what every node answered.
func ExampleQuorumError() {
	// Three independent masters, from $REDLOCK_ADDRS.
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",")[:3] {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := redlock.New(clients, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	held, err := locker.TryAcquire(ctx, "report", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer held.Release(ctx)

	_, err = locker.TryAcquire(ctx, "report", time.Minute)
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Printf("granted by %d of %d nodes, %d needed\n", qe.Got, len(qe.Nodes), qe.Need)
		for _, n := range qe.Nodes {
			fmt.Println(n.Err)
		}
	}
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	// Output:
	// granted by 0 of 3 nodes, 2 needed
	// held by another owner
	// held by another owner
	// held by another owner
	// true
}

// A waiting Acquire is woken by the holder's release (on any node), so a
// long retry delay costs no latency; it only bounds how late a release
// that announces nothing (an expiry, another Redlock client) is noticed.
// Close ends the Locker's pub/sub connections when it is no longer needed.
func ExampleLocker_Close() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379", "redis-d:6379", "redis-e:6379"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := redlock.New(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := dlock.Acquire(ctx, locker, "report:daily", 30*time.Second, dlock.WithRetryDelay(2*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(context.Background())
	// ... the work ...
}
