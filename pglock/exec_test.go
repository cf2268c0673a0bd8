package pglock_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
)

// In every query mode the acquiring and releasing statements lock the same
// keys (extreme values included: the arguments' encoding must give the
// very keys psql would lock), a second attempt is refused and draws no
// fence, a lease is set and restored, and a tracer sees the statements.
func TestQueryModes(t *testing.T) {
	keys := []pglock.Key{
		pglock.Int64Key(math.MinInt64), pglock.Int64Key(-1), pglock.Int64Key(math.MaxInt64),
		pglock.KeyPair(math.MinInt32, -1), pglock.KeyPair(-7, math.MaxInt32),
	}
	for _, tc := range []struct {
		name   string
		mode   pgx.QueryExecMode
		tracer *countingTracer
	}{
		{name: "default", mode: pgx.QueryExecModeCacheStatement},
		{name: "traced", mode: pgx.QueryExecModeCacheStatement, tracer: &countingTracer{}},
		{name: "describe", mode: pgx.QueryExecModeCacheDescribe},
		{name: "exec", mode: pgx.QueryExecModeExec},
		{name: "simple", mode: pgx.QueryExecModeSimpleProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := shared.PoolConfig(1)
			cfg.ConnConfig.DefaultQueryExecMode = tc.mode
			if tc.tracer != nil {
				cfg.ConnConfig.Tracer = tc.tracer
			}
			pool := poolWith(t, cfg)
			l, err := pglock.New(pool, pglock.WithSessionLease(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			other := newLocker(t, 2)
			raw := shared.Pool(t, 1)

			var last uint64
			for _, k := range keys {
				lock, err := l.ForKey(k).TryAcquire(testCtx(t), k.String(), 10*time.Second)
				if err != nil {
					t.Fatalf("%v: %v", k, err)
				}
				t.Cleanup(func() { lock.Release(context.Background()) }) // after a failure
				// holderPID fails unless pg_locks shows exactly k.
				holderPID(t, k)
				// Only grants draw fences (the refused attempts in between
				// draw none), and no other test runs meanwhile.
				if last != 0 && lock.Fence() != last+1 {
					t.Fatalf("%v: fence %d after %d, want the next value", k, lock.Fence(), last)
				}
				last = lock.Fence()
				if second, err := other.ForKey(k).TryAcquire(testCtx(t), k.String(), time.Second); err == nil {
					second.Release(context.Background())
					t.Fatalf("%v: a second Locker got the lock while it was held", k)
				} else {
					wantIs(t, err, dlock.ErrNotAcquired)
				}
				if got := rawTryLock(t, raw, k); got {
					t.Fatalf("%v: psql-style pg_try_advisory_lock succeeded while pglock holds it", k)
				}
				if err := lock.Release(testCtx(t)); err != nil {
					t.Fatalf("%v: release: %v", k, err)
				}
				if got := rawTryLock(t, raw, k); !got {
					t.Fatalf("%v: still held after release", k)
				}
			}

			// The lease's previous value came back through the release's
			// text argument; the pool's one connection is the lock's.
			var timeout string
			if err := pool.QueryRow(testCtx(t), "SHOW idle_session_timeout").Scan(&timeout); err != nil || timeout != "0" {
				t.Fatalf("idle_session_timeout after release = %q (%v), want 0", timeout, err)
			}
			if tc.tracer != nil {
				if acq, rel := tc.tracer.counts(); acq < len(keys) || rel < len(keys) {
					t.Fatalf("tracer saw %d acquiring and %d releasing statements, want %d each", acq, rel, len(keys))
				}
			}
		})
	}
}

// rawTryLock takes and at once gives back k in a session of its own, as
// psql would; it reports whether the lock was free.
func rawTryLock(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, k pglock.Key) bool {
	t.Helper()
	params, args := keyParams(k)
	sql := "SELECT CASE WHEN pg_try_advisory_lock(" + params + ") THEN pg_advisory_unlock(" + params + ") ELSE false END"
	var got bool
	if err := pool.QueryRow(testCtx(t), sql, args...).Scan(&got); err != nil {
		t.Fatalf("%v: %v", k, err)
	}
	return got
}

// keyParams returns how an advisory-lock function takes k: its parameters
// and their arguments.
func keyParams(k pglock.Key) (string, []any) {
	if n, ok := k.Int64(); ok {
		return "$1::int8", []any{n}
	}
	a, b, _ := k.Pair()
	return "$1::int4, $2::int4", []any{a, b}
}

// countingTracer counts the acquiring and releasing statements it sees.
type countingTracer struct {
	mu       sync.Mutex
	acq, rel int
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.Contains(d.SQL, "pg_try_advisory_lock"):
		c.acq++
	case strings.Contains(d.SQL, "pg_advisory_unlock"):
		c.rel++
	}
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) counts() (acq, rel int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acq, c.rel
}

// poolWith returns a pool made from cfg, closed when the test ends.
func poolWith(t *testing.T, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
