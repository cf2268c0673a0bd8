package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
)

// Inspect reports one row per node holding the key, and Majority only while
// a majority of the nodes hold it with the same token.
func TestInspectMajority(t *testing.T) {
	ctx := testCtx(t)
	nodes := shared[:3]
	l := newLocker(t, nodes)
	lk, err := l.TryAcquire(ctx, "insp:a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	cs := clients(t, nodes)
	rows, err := l.Inspect(ctx, "insp:*", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("Inspect: %d rows, want one per node: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if !r.Majority || r.Token != lk.Token() || r.Key != "insp:a" || r.Fence == 0 || r.Fence > lk.Fence() {
			t.Errorf("row %+v: want majority with token %s, fence <= %d", r, lk.Token(), lk.Fence())
		}
	}

	cs[0].Del(ctx, "insp:a") // 2 of 3 still hold it
	rows, _ = l.Inspect(ctx, "insp:*", 0)
	if len(rows) != 2 || !rows[0].Majority || !rows[1].Majority {
		t.Fatalf("after one deletion: %+v, want 2 rows with Majority", rows)
	}

	cs[1].Set(ctx, "insp:a", "other-token", 10*time.Second) // 1 of 3 holds our token
	rows, _ = l.Inspect(ctx, "insp:*", 0)
	if len(rows) != 2 {
		t.Fatalf("after the overwrite: %+v, want 2 rows", rows)
	}
	for _, r := range rows {
		if r.Majority {
			t.Errorf("row %+v: Majority with 1 of 3 nodes agreeing", r)
		}
	}
	cs[1].Del(ctx, "insp:a", keys.Fence("insp:a"))
}

// With a limit, one key is listed, on every node that holds it (a key one
// node's scan did not return is read there too), with Majority.
func TestInspectLimitPerKey(t *testing.T) {
	ctx := testCtx(t)
	nodes := shared[:3]
	l := newLocker(t, nodes)
	for _, k := range []string{"inspl:a", "inspl:b"} {
		lk, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Release(ctx)
	}
	rows, err := l.Inspect(ctx, "inspl:*", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Key != rows[2].Key || !rows[0].Majority || !rows[1].Majority || !rows[2].Majority {
		t.Fatalf("limit 1: %+v, want one key on 3 nodes with Majority", rows)
	}
}

// Inspect's arguments are checked as on the other backends, before any
// node is asked.
func TestInspectInvalid(t *testing.T) {
	ctx := testCtx(t)
	l := newLocker(t, shared[:3])
	for _, c := range []struct {
		pattern string
		limit   int
	}{{"*", -1}, {"insp:[", 0}} {
		if _, err := l.Inspect(ctx, c.pattern, c.limit); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Inspect(%q, %d): %v, want ErrInvalid", c.pattern, c.limit, err)
		}
	}
}
