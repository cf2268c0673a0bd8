package pglock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/pglock"
)

// Inspect lists this Locker's locks by name with their grant's fence, a lock
// another session took with raw SQL by its advisory key (or by name when the
// pattern names it), with pid, application_name and the sessions waiting.
func TestInspectAdvisory(t *testing.T) {
	ctx := testCtx(t)
	l := newLocker(t, 4)
	mine := mustAcquire(t, l, "insp:mine", 10*time.Second)

	// Another session takes HashKey("insp:other") and 424242 by hand, and a
	// third one blocks behind 424242.
	pool := shared.Pool(t, 4)
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if _, err := other.Exec(ctx, "SET application_name = 'inspect-test'"); err != nil {
		t.Fatal(err)
	}
	n, _ := pglock.HashKey("insp:other").Int64()
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1), pg_advisory_lock(424242)", n); err != nil {
		t.Fatal(err)
	}
	defer other.Exec(context.Background(), "SELECT pg_advisory_unlock_all()")
	var otherPID int
	other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&otherPID)
	waiter, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Release()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		waiter.Exec(wctx, "SELECT pg_advisory_lock(424242)") // cancelled below
	}()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := l.Inspect(ctx, "advisory:424242", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 && got[0].Waiting == 1 {
			if got[0].PID != otherPID || got[0].Service != "inspect-test" || got[0].TTL != 0 || got[0].Since.IsZero() {
				t.Errorf("advisory:424242: %+v, want pid %d, service inspect-test", got[0], otherPID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("advisory:424242: %+v, want one row with one waiter", got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	got, err := l.Inspect(ctx, "insp:mine", 0)
	if err != nil || len(got) != 1 || got[0].Fence != mine.Fence() || got[0].Since.IsZero() || got[0].PID == 0 {
		t.Fatalf("insp:mine: %+v, %v; want fence %d", got, err, mine.Fence())
	}
	got, _ = l.Inspect(ctx, "insp:other", 0)
	if len(got) != 1 || got[0].PID != otherPID || got[0].Fence != 0 {
		t.Fatalf("insp:other (a plain name: its key is computed): %+v", got)
	}
	got, _ = l.Inspect(ctx, "advisory:*", 0)
	keys := map[string]bool{}
	for _, r := range got {
		keys[r.Key] = true
	}
	if !keys["advisory:"+strconv.FormatInt(n, 10)] || !keys["advisory:424242"] || keys["insp:mine"] {
		t.Fatalf("advisory:*: %v", keys)
	}
	if got, _ := l.Inspect(ctx, "advisory:*", 1); len(got) != 1 {
		t.Fatalf("limit 1: %d rows", len(got))
	}
	mine.Release(ctx)
	if got, _ := l.Inspect(ctx, "insp:mine", 0); len(got) != 0 {
		t.Fatalf("released insp:mine still listed: %+v", got)
	}
}
