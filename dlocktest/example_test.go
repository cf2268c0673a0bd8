package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// syncInvoices is the code under test: every replica runs it, and the one
// that gets the lock does the work; the others skip it.
func syncInvoices(ctx context.Context, locker dlock.Locker) (ran bool, err error) {
	err = dlock.Do(ctx, locker, "invoices:sync", time.Minute, func(ctx context.Context) error {
		ran = true // ... the work ...
		return nil
	}, dlock.WithRetryCount(0)) // one try: busy means another replica runs it
	if errors.Is(err, dlock.ErrNotAcquired) {
		return false, nil
	}
	return ran, err
}

// A job skips its run while another replica holds the lock, and runs once
// it is free.
func Example_busy() {
	ctx := context.Background()
	locker := dlocktest.New()

	other, err := locker.Hold("invoices:sync", time.Minute) // another replica holds it
	if err != nil {
		panic(err)
	}
	ran, err := syncInvoices(ctx, locker)
	fmt.Println("while busy: ran", ran, "err", err)

	other.Release(ctx)
	ran, err = syncInvoices(ctx, locker)
	fmt.Println("once free:  ran", ran, "err", err)
	// Output:
	// while busy: ran false err <nil>
	// once free:  ran true err <nil>
}

// postEntries is the code under test: it posts entries to a ledger under
// the lock, and must stop before the next post once the lock may be lost.
func postEntries(ctx context.Context, locker dlock.Locker, posted chan<- int) error {
	return dlock.Do(ctx, locker, "ledger", time.Minute, func(ctx context.Context) error {
		for i := 1; ; i++ {
			if ctx.Err() != nil { // the lock may be lost: stop before the irreversible step
				return context.Cause(ctx)
			}
			select {
			case posted <- i:
			case <-ctx.Done():
			}
		}
	})
}

// Code that holds a lock stops when the lock is lost: Lose takes it away,
// and Do's context ends with cause dlock.ErrLockLost.
func Example_lost() {
	ctx := context.Background()
	locker := dlocktest.New()
	posted := make(chan int)
	done := make(chan error)
	go func() { done <- postEntries(ctx, locker, posted) }()

	fmt.Println("posted entry", <-posted)
	fmt.Println("posted entry", <-posted)
	locker.Lose("ledger") // the server lost the lock (a failover, an expired lease)
	err := <-done
	fmt.Println("stopped:", errors.Is(err, dlock.ErrLockLost))
	// Output:
	// posted entry 1
	// posted entry 2
	// stopped: true
}

// A TTL runs out on the Locker's clock, which the test moves: no sleeping.
func ExampleLocker_Advance() {
	ctx := context.Background()
	locker := dlocktest.New()
	lock, err := locker.TryAcquire(ctx, "cache:warm", 30*time.Second)
	if err != nil {
		panic(err)
	}

	locker.Advance(20 * time.Second)
	fmt.Println("after 20s: held", lock.Held())
	locker.Advance(10 * time.Second)
	fmt.Println("after 30s: held", lock.Held())
	fmt.Println("extend:", errors.Is(lock.Extend(ctx, 30*time.Second), dlock.ErrLockLost))
	_, err = locker.TryAcquire(ctx, "cache:warm", 30*time.Second)
	fmt.Println("another owner takes it:", err == nil)
	// Output:
	// after 20s: held true
	// after 30s: held false
	// extend: true
	// another owner takes it: true
}

// Requests fail as when the backend cannot be reached: a waiting Acquire
// rides out two failed attempts, and a one-try Do reports the outage.
func ExampleLocker_FailNext() {
	ctx := context.Background()
	locker := dlocktest.New()

	locker.FailNext(2, dlock.ErrUnavailable)
	lock, err := dlock.Acquire(ctx, locker, "k", time.Minute)
	fmt.Println("Acquire through two failures:", err)
	lock.Release(ctx)

	locker.Fail(nil) // until Heal
	err = dlock.Do(ctx, locker, "k", time.Minute, func(context.Context) error { return nil }, dlock.WithRetryCount(0))
	fmt.Println("Do during an outage:", errors.Is(err, dlock.ErrUnavailable))
	locker.Heal()
	// Output:
	// Acquire through two failures: <nil>
	// Do during an outage: true
}
