package pglock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/pglock"
)

// Inspect lists this Locker's locks by name with their grant's fence, a lock
// another session took with raw SQL by its advisory key (or by name when the
// pattern names it), with pid, application_name and the sessions waiting.
func TestInspectAdvisory(t *testing.T) {
	ctx := testCtx(t)
	l := newLocker(t, 4)
	mine := lockcheck.MustAcquire(t, l, "insp:mine", 10*time.Second)

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

// With WithHolderInfo, a Locker's held lock shows its name (and service) in
// its session's application_name, so that any Locker's Inspect lists it by
// name for any pattern; the session's own application_name comes back at
// release. A name that application_name cannot carry whole is listed by
// its key, and found by its plain name.
func TestInspectHolderInfo(t *testing.T) {
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) { testInspectHolderInfo(t, lease) })
	}
}

func testInspectHolderInfo(t *testing.T, lease bool) {
	ctx := testCtx(t)
	cfg := shared.PoolConfig(1)
	cfg.ConnConfig.RuntimeParams["application_name"] = "app0"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts := []pglock.Option{pglock.WithHolderInfo("billing")}
	if lease {
		opts = append(opts, pglock.WithSessionLease(time.Minute))
	}
	holder, err := pglock.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	viewer := newLocker(t, 2)

	name := "insp:held:" + strconv.FormatBool(lease)
	lock := lockcheck.MustAcquire(t, holder, name, 10*time.Second)
	for _, pattern := range []string{"*", "insp:held:*", name} {
		got, err := viewer.Inspect(ctx, pattern, 0)
		if err != nil || len(got) != 1 || got[0].Key != name || got[0].Service != "billing" || got[0].PID == 0 {
			t.Fatalf("Inspect(%q): %+v, %v; want %s held by service billing", pattern, got, err, name)
		}
	}
	// A refused attempt changes nothing on its session.
	cfg2 := shared.PoolConfig(1)
	cfg2.ConnConfig.RuntimeParams["application_name"] = "app1"
	pool2, err := pgxpool.NewWithConfig(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	rival, err := pglock.New(pool2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rival.Close() })
	_, err = rival.TryAcquire(ctx, name, time.Second)
	wantIs(t, err, dlock.ErrNotAcquired)
	var app, idle string
	if err := pool2.QueryRow(ctx, "SELECT current_setting('application_name'), current_setting('idle_session_timeout')").Scan(&app, &idle); err != nil {
		t.Fatal(err)
	}
	if app != "app1" || idle != "0" {
		t.Fatalf("after a refused attempt the session shows application_name %q, idle_session_timeout %q; want app1, 0", app, idle)
	}

	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT current_setting('application_name'), current_setting('idle_session_timeout')").Scan(&app, &idle); err != nil {
		t.Fatal(err)
	}
	if app != "app0" || idle != "0" {
		t.Fatalf("after release the session shows application_name %q, idle_session_timeout %q; want app0, 0", app, idle)
	}

	long := "insp:" + strings.Repeat("x", 60) // beyond application_name's 63 bytes
	lock = lockcheck.MustAcquire(t, holder, long, 10*time.Second)
	n, _ := pglock.HashKey(long).Int64()
	got, err := viewer.Inspect(ctx, "*", 0)
	if err != nil || len(got) != 1 || got[0].Key != "advisory:"+strconv.FormatInt(n, 10) {
		t.Fatalf("Inspect(*) with a long name held: %+v, %v; want it by its key", got, err)
	}
	if got, _ := viewer.Inspect(ctx, long, 0); len(got) != 1 || got[0].Key != long {
		t.Fatalf("Inspect(long name): %+v", got)
	}
	lock.Release(ctx)
}

// A name published under a prefix is listed without it by a Locker with
// the same prefix, and whole by one without a prefix; a Locker with
// another prefix cannot name it (and shows the session's application_name
// as it is, in Service).
func TestInspectHolderInfoPrefix(t *testing.T) {
	ctx := testCtx(t)
	holder := newLocker(t, 2, pglock.WithPrefix("t1:"), pglock.WithHolderInfo(""))
	lockcheck.MustAcquire(t, holder, "job", 10*time.Second)
	n, _ := pglock.HashKey("t1:job").Int64()
	for _, tc := range []struct {
		opts []pglock.Option
		want string
	}{
		{[]pglock.Option{pglock.WithPrefix("t1:")}, "job"},
		{nil, "t1:job"},
		{[]pglock.Option{pglock.WithPrefix("t2:")}, "advisory:" + strconv.FormatInt(n, 10)},
	} {
		got, err := newLocker(t, 1, tc.opts...).Inspect(ctx, "*", 0)
		if err != nil || len(got) != 1 || got[0].Key != tc.want {
			t.Errorf("Inspect with options %d: %+v, %v; want %s", len(tc.opts), got, err, tc.want)
		}
	}
}

// BenchmarkHolderInfo: an uncontended TryAcquire+Release cycle without and
// with WithHolderInfo (a CTE and two set_config calls more per cycle).
func BenchmarkHolderInfo(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []pglock.Option
	}{{"off", nil}, {"on", []pglock.Option{pglock.WithHolderInfo("bench")}}} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := pglock.New(shared.Pool(b, 2), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				lk, err := l.TryAcquire(ctx, "bench:holder", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
