package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/internal/fencetest"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/pglock"
)

var (
	shared *testsrv.Postgres
	pool   *pgxpool.Pool
	guard  *pgfence.Guard
	values *pgfence.Table
)

const valuesSQL = `CREATE TABLE fenced_values (
	id bigint PRIMARY KEY,
	value text,
	fence numeric(20,0),
	fence_holder text
)`

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pgfence-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	shared, err = testsrv.NewPostgres(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err = pgxpool.NewWithConfig(ctx, shared.PoolConfig(8))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	guard, _ = pgfence.NewGuard()
	values, _ = pgfence.NewTable("fenced_values", "id")
	for _, setup := range []func() error{
		func() error { return guard.Migrate(ctx, pool) },
		func() error { return pglock.Migrate(ctx, pool) },
		func() error { _, err := pool.Exec(ctx, valuesSQL); return err },
	} {
		if err := setup(); err != nil {
			fmt.Fprintln(os.Stderr, "setup:", err)
			return 1
		}
	}
	os.Setenv("DATABASE_URL", shared.DSN()) // for the examples
	code := m.Run()
	pool.Close()
	shared.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var idSeq atomic.Int64

// newRow inserts a never-fenced row and returns its id.
func newRow(t *testing.T) int64 {
	t.Helper()
	id := idSeq.Add(1)
	if _, err := pool.Exec(testCtx(t), "INSERT INTO fenced_values (id) VALUES ($1)", id); err != nil {
		t.Fatal(err)
	}
	return id
}

// asOp renames the operation of a stale error: the adapters build the
// contract's read and write from Register plus SQL.
func asOp(op string, err error) error {
	var se *fence.StaleError
	if errors.As(err, &se) {
		se.Op = op
	}
	return err
}

// inTx runs fn in a transaction that commits when fn returns nil.
func inTx(t *testing.T, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(testCtx(t), pool, fn)
}

// tableValue adapts one row of the Table guard to the shared contract.
type tableValue struct {
	t  *testing.T
	id int64
}

func (v *tableValue) Register(f uint64, tok string) error {
	return values.Register(testCtx(v.t), pool, v.id, f, tok)
}

func (v *tableValue) Read(f uint64, tok string) (string, error) {
	var s *string
	err := inTx(v.t, func(tx pgx.Tx) error {
		if err := values.Register(testCtx(v.t), tx, v.id, f, tok); err != nil {
			return asOp("read", err)
		}
		return tx.QueryRow(testCtx(v.t), "SELECT value FROM fenced_values WHERE id = $1", v.id).Scan(&s)
	})
	if s == nil {
		return "", err
	}
	return *s, err
}

func (v *tableValue) Write(f uint64, tok, value string) error {
	return values.Update(testCtx(v.t), pool, v.id, f, tok, map[string]any{"value": value})
}

func (v *tableValue) Peek() (string, uint64) { return peek(v.t, v.id) }

func peek(t *testing.T, id int64) (string, uint64) {
	var s string
	var f uint64
	var fs string
	err := pool.QueryRow(testCtx(t), "SELECT COALESCE(value, ''), COALESCE(fence, 0)::text FROM fenced_values WHERE id = $1", id).Scan(&s, &fs)
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	fmt.Sscan(fs, &f)
	return s, f
}

// guardValue adapts the Guard to the contract: a resource named after a
// row, registered in the transaction that reads or writes the row.
type guardValue struct {
	t  *testing.T
	id int64
}

func (v *guardValue) resource() string { return fmt.Sprintf("value-%d", v.id) }

func (v *guardValue) Register(f uint64, tok string) error {
	return guard.Register(testCtx(v.t), pool, v.resource(), f, tok)
}

func (v *guardValue) Read(f uint64, tok string) (string, error) {
	var s *string
	err := inTx(v.t, func(tx pgx.Tx) error {
		if err := guard.Register(testCtx(v.t), tx, v.resource(), f, tok); err != nil {
			return asOp("read", err)
		}
		return tx.QueryRow(testCtx(v.t), "SELECT value FROM fenced_values WHERE id = $1", v.id).Scan(&s)
	})
	if s == nil {
		return "", err
	}
	return *s, err
}

func (v *guardValue) Write(f uint64, tok, value string) error {
	return inTx(v.t, func(tx pgx.Tx) error {
		if err := guard.Register(testCtx(v.t), tx, v.resource(), f, tok); err != nil {
			return asOp("write", err)
		}
		_, err := tx.Exec(testCtx(v.t), "UPDATE fenced_values SET value = $2 WHERE id = $1", v.id, value)
		return err
	})
}

func (v *guardValue) Peek() (string, uint64) {
	s, _ := peek(v.t, v.id)
	h, err := guard.Highest(testCtx(v.t), pool, v.resource())
	if err != nil {
		v.t.Fatalf("Highest: %v", err)
	}
	return s, h
}

func TestContract(t *testing.T) {
	t.Run("Table", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fencetest.Guard { return &tableValue{t: t, id: newRow(t)} })
	})
	t.Run("Guard", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fencetest.Guard { return &guardValue{t: t, id: newRow(t)} })
	})
}

// The stale-holder scenario with a real Postgres lock: holder A reads under its
// fence and pauses; its session dies (terminated, as idle_session_timeout
// or a network cut would do), so B gets the lock with a higher fence and
// writes. A wakes up and writes: refused, and B's value stands.
func TestPausedHolderLateWrite(t *testing.T) {
	ctx := testCtx(t)
	la, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	lbPool := shared.Pool(t, 2)
	lb, err := pglock.New(lbPool)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	id := newRow(t)
	lockName := fmt.Sprintf("account-%d", id)

	a, err := la.TryAcquire(ctx, lockName, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := values.Update(ctx, pool, id, a.Fence(), a.Token(), map[string]any{"value": "100"}); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	// A pauses here. Meanwhile its session is killed and B takes over.
	holderPID := func() uint32 {
		locks, err := shared.AdvisoryLocks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := pglock.HashKey(lockName).Int64()
		for _, l := range locks {
			if l.Int64() == want && l.Granted {
				return l.PID
			}
		}
		t.Fatalf("A's lock not in pg_locks: %+v", locks)
		return 0
	}
	if err := shared.Terminate(ctx, holderPID()); err != nil {
		t.Fatal(err)
	}
	b, err := dlock.Acquire(ctx, lb, lockName, 10*time.Second)
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	defer b.Release(context.Background())
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
	err = inTx(t, func(tx pgx.Tx) error {
		if err := values.Register(ctx, tx, id, b.Fence(), b.Token()); err != nil {
			return err
		}
		var cur string
		if err := tx.QueryRow(ctx, "SELECT value FROM fenced_values WHERE id = $1", id).Scan(&cur); err != nil {
			return err
		}
		return values.Update(ctx, tx, id, b.Fence(), b.Token(), map[string]any{"value": cur + "+50"})
	})
	if err != nil {
		t.Fatalf("B's read-modify-write: %v", err)
	}

	// A wakes up and writes what it computed before the pause.
	err = values.Update(ctx, pool, id, a.Fence(), a.Token(), map[string]any{"value": "100-30"})
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Fence != a.Fence() || se.Highest != b.Fence() {
		t.Fatalf("A's late write: got %v, want a StaleError %d < %d", err, a.Fence(), b.Fence())
	}
	if v, f := peek(t, id); v != "100+50" || f != b.Fence() {
		t.Fatalf("row after A's late write: value %q fence %d; want B's %q, %d", v, f, "100+50", b.Fence())
	}
	// A's handle knows it lost the lock too: its session ended.
	if err := a.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("A's Extend: %v, want ErrLockLost", err)
	}
}

// A stale transaction that reaches the guard while the new holder's
// transaction holds the guard row waits for it, and is then refused.
func TestStaleWriterWaitsForRegisteredHolder(t *testing.T) {
	ctx := testCtx(t)
	resource := fmt.Sprintf("res-%d", idSeq.Add(1))
	if err := guard.Register(ctx, pool, resource, 1, "tokA"); err != nil {
		t.Fatal(err)
	}
	txB, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(context.Background())
	if err := guard.Register(ctx, txB, resource, 2, "tokB"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		got <- inTx(t, func(tx pgx.Tx) error { return guard.Register(ctx, tx, resource, 1, "tokA") })
	}()
	select {
	case err := <-got:
		t.Fatalf("A's registration did not wait for B's transaction: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A after B committed: %v, want ErrStale", err)
	}
}

// If the new holder's transaction rolls back, its registration is undone:
// the guard is exactly as durable as the writes it fences.
func TestRolledBackRegistration(t *testing.T) {
	ctx := testCtx(t)
	resource := fmt.Sprintf("res-%d", idSeq.Add(1))
	if err := guard.Register(ctx, pool, resource, 1, "tokA"); err != nil {
		t.Fatal(err)
	}
	rollback := errors.New("rollback")
	err := inTx(t, func(tx pgx.Tx) error {
		if err := guard.Register(ctx, tx, resource, 5, "tokB"); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if h, err := guard.Highest(ctx, pool, resource); err != nil || h != 1 {
		t.Fatalf("Highest after a rolled-back registration: %d, %v; want 1", h, err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := testCtx(t)
	for _, name := range []string{"", "a.b.c", "x.", ".y"} {
		if _, err := pgfence.NewTable(name, "id"); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewTable(%q): %v", name, err)
		}
		if _, err := pgfence.NewGuard(pgfence.WithGuardTable(name)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("WithGuardTable(%q): %v", name, err)
		}
	}
	if _, err := pgfence.NewTable("t", ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("empty id column: %v", err)
	}
	if _, err := pgfence.NewTable("t", "id", pgfence.WithColumns("", "h")); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("empty fence column: %v", err)
	}
	if _, err := pgfence.NewGuard(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil option: %v", err)
	}
	id := newRow(t)
	if err := values.Update(ctx, pool, id, 1, "tok", map[string]any{"fence": 9}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("setting the fence column: %v", err)
	}
	if err := values.Update(ctx, nil, id, 1, "tok", nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil querier: %v", err)
	}
	var nilPool *pgxpool.Pool
	if err := guard.Register(ctx, nilPool, "r", 1, "tok"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("typed nil pool: %v", err)
	}
	err := values.Update(ctx, pool, int64(-1), 1, "tok", map[string]any{"value": "x"})
	if !errors.Is(err, pgfence.ErrNoRow) || errors.Is(err, fence.ErrStale) {
		t.Errorf("missing row: %v, want ErrNoRow", err)
	}
	if err := values.Update(ctx, pool, id, 1, "tok", map[string]any{"no_such_column": 1}); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("unknown column: %v", err)
	}
	if v, f := peek(t, id); v != "" || f != 0 {
		t.Errorf("refused requests changed the row: %q, %d", v, f)
	}
	g, _ := pgfence.NewGuard(pgfence.WithGuardTable("no_such_guard"))
	err = g.Register(ctx, pool, "r", 1, "tok")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "no_such_guard") {
		t.Errorf("missing guard table: %v", err)
	}
}
