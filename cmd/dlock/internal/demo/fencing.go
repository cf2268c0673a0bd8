package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/fence"
)

var fencingScenario = scenario{
	title:   "Fencing: the resource rejects a stale holder",
	short:   "fencing",
	summary: "the stale holder's late write was rejected",
	proves: []string{
		"A TTL protects against a crashed holder, not a slow one: A's lock expired during its pause,",
		"and nothing in the lock could stop A from writing afterwards. The fence could: every grant",
		"carries a larger number, and the resource (here fence.Memory) refuses a write whose fence is",
		"below the highest it has seen. The lock alone cannot do this; the resource must take part.",
	},
	run: func(ctx context.Context, e *env, s *section) error {
		l, err := e.locker()
		if err != nil {
			return err
		}
		key := e.key("invoice")
		const resource = "invoice-42"
		guard := fence.NewMemory()
		var value string

		s.say("The protected resource is a value behind an in-memory fence guard (fence.NewMemory).")
		tA := time.Now()
		lockA, err := l.TryAcquire(ctx, key, shortTTL)
		if err != nil {
			return fmt.Errorf("holder A could not acquire: %w", err)
		}
		s.result(fmt.Sprintf("A acquires %q for %v", "invoice", shortTTL), fmt.Sprintf("fence %d", lockA.Fence()), true, "")
		s.say("A stalls for %v (a GC pause, a slow disk) before writing; its lock expires.", stall)
		if err := sleep(ctx, stall); err != nil {
			return err
		}
		tB := time.Now()
		lockB, err := l.TryAcquire(ctx, key, longTTL)
		if err != nil {
			return fmt.Errorf("holder B could not acquire after A's lock expired: %w", err)
		}
		defer lockB.Release(context.WithoutCancel(ctx))
		s.result("B acquires it", fmt.Sprintf("fence %d", lockB.Fence()), lockB.Fence() > lockA.Fence(),
			fmt.Sprintf("a fence above %d", lockA.Fence()))

		err = guard.Write(resource, lockB.Fence(), lockB.Token(), func() error { value = "B"; return nil })
		s.result(fmt.Sprintf("B writes with fence %d", lockB.Fence()), accepted(err), err == nil, "accepted")

		tWB := time.Now()
		err = guard.Write(resource, lockA.Fence(), lockA.Token(), func() error { value = "A"; return nil })
		s.result(fmt.Sprintf("A wakes up and writes with fence %d", lockA.Fence()), accepted(err), errors.Is(err, fence.ErrStale), "rejected (ErrStale)")
		tWA := time.Now()
		a, b := e.scene+"fencing: A", e.scene+"fencing: B"
		e.tl.Bar(a, tA, tA.Add(stall), timeline.Paused, "A stalls; its lock expires meanwhile")
		e.tl.Bar(a, tA, tWA, timeline.HeldLost, "A believes it holds the lock")
		e.tl.Bar(b, tB, tWA.Add(stall/3), timeline.Held, "B holds the lock")
		for _, who := range []string{a, b} {
			e.tl.Bar(who, tB, tWA, timeline.Explained, "A and B inside at once: A's lock expired while it stalled")
		}
		e.tl.Mark(b, tWB, timeline.Accepted, fmt.Sprintf("B's write with fence %d: accepted", lockB.Fence()))
		e.tl.Mark(a, tWA, timeline.Rejected, fmt.Sprintf("A's late write with fence %d: rejected (ErrStale)", lockA.Fence()))
		s.result("value of the resource", fmt.Sprintf("%q", value), value == "B", `"B"`)
		s.result("A's handle, asked now: still held", yesNo(lockA.Held()), !lockA.Held(), "false")
		s.say("(A could have asked before writing, but the pause can fall between that check and the write.)")
		return nil
	},
}

func accepted(err error) string {
	if err == nil {
		return "accepted"
	}
	var se *fence.StaleError
	if errors.As(err, &se) {
		return fmt.Sprintf("rejected (ErrStale: highest seen is %d)", se.Highest)
	}
	return "error: " + err.Error()
}
