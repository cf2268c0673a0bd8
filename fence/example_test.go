package fence_test

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/fence"
)

// A stale holder's late write. A took the lock with fence 1 and stalled; its lock
// expired, B took it with fence 2 and wrote. When A wakes up and writes with
// fence 1, the guard refuses it. In a real program the fences and tokens
// come from lock.Fence() and lock.Token().
func ExampleMemory() {
	guard := fence.NewMemory()
	balance := 0

	errB := guard.Write("account:42", 2, "token-B", func() error {
		balance = 200
		return nil
	})
	errA := guard.Write("account:42", 1, "token-A", func() error {
		balance = 100
		return nil
	})

	fmt.Println("B:", errB)
	fmt.Println("A:", errA)
	fmt.Println("A is stale:", errors.Is(errA, fence.ErrStale))
	fmt.Println("balance:", balance)
	// Output:
	// B: <nil>
	// A: fence: write "account:42": stale fence 1: highest seen is 2
	// A is stale: true
	// balance: 200
}

// Read-modify-write: register the fence with the read, so that a stale
// holder's write arriving between the read and the write is refused instead
// of being silently overwritten.
func ExampleMemory_Read() {
	guard := fence.NewMemory()
	stock := 5

	const fenceB, tokenB = 8, "token-B" // from B's lock
	var seen int
	if err := guard.Read("stock:apples", fenceB, tokenB, func() error {
		seen = stock
		return nil
	}); err != nil {
		fmt.Println(err)
		return
	}

	// A's lock expired long ago (fence 7); its late write arrives now.
	errA := guard.Write("stock:apples", 7, "token-A", func() error {
		stock = 0
		return nil
	})
	fmt.Println("A:", errA)

	errB := guard.Write("stock:apples", fenceB, tokenB, func() error {
		stock = seen - 1
		return nil
	})
	fmt.Println("B:", errB, "stock:", stock)
	// Output:
	// A: fence: write "stock:apples": stale fence 7: highest seen is 8
	// B: <nil> stock: 4
}

// Two holders can end up with the same fence after a fault on the lock
// service (a Redis failover that lost the counter). The first to reach the
// resource keeps it.
func ExampleStaleError() {
	guard := fence.NewMemory()
	_ = guard.Register("report", 5, "token-A")
	err := guard.Register("report", 5, "token-B")

	var se *fence.StaleError
	if errors.As(err, &se) {
		fmt.Println(se.Fence, se.Highest, se.Tie)
	}
	fmt.Println(err)
	// Output:
	// 5 5 true
	// fence: register "report": stale fence 5: another holder already used fence 5
}
