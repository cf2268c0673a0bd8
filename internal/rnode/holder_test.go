package rnode_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rnode"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A lock on two keys (Redlock's shape: a fence for the release, waiter
// queues) writes its holder record beside each key with the grant, renews
// both with an extension, and its release deletes the one that is still
// its own, leaving the one a later holder wrote.
func TestHolderRecordOfTwoKeys(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	n := rnode.New(srv.Client(t), "test", time.Hour, time.Second, nil)
	ks := []string{"a", "b"}
	hs := []string{keys.Holder("a"), keys.Holder("b")}
	rec := `{"token":"t1"}`
	r, _, err := n.Acquire(ctx, rnode.Attempt{Keys: ks, Token: "t1", TTL: 10 * time.Second, Holder: rec})
	if err != nil || r.Status != rnode.Granted {
		t.Fatalf("acquire: %+v, %v", r, err)
	}
	fence := r.Fence
	for _, h := range hs {
		if got, ttl := raw.Get(ctx, h).Val(), raw.PTTL(ctx, h).Val(); got != rec || ttl <= 0 || ttl > 10*time.Second {
			t.Fatalf("%s after the grant: %q (TTL %v), want %q (TTL at most 10s)", h, got, ttl, rec)
		}
	}
	// An election's term record replaces the grant's where the key holds
	// the token, and nowhere for another token.
	if err := n.WriteHolders(ctx, ks, "other", `{"token":"other"}`, time.Minute); err != nil {
		t.Fatal(err)
	}
	const term = `{"token":"t1","fence":1}`
	if err := n.WriteHolders(ctx, ks, "t1", term, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if got := raw.Get(ctx, h).Val(); got != term {
			t.Fatalf("%s after WriteHolders: %q, want %q", h, got, term)
		}
	}
	rec = term
	// Refused (b is held): nothing written over t1's records.
	r, _, err = n.Acquire(ctx, rnode.Attempt{Keys: []string{"c", "b"}, Token: "t2", TTL: time.Minute, Holder: `{"token":"t2"}`})
	if err != nil || r.Status != rnode.Busy {
		t.Fatalf("acquire of a held key: %+v, %v", r, err)
	}
	if n := raw.Exists(ctx, "c", keys.Holder("c")).Val(); n != 0 || raw.Get(ctx, hs[1]).Val() != rec {
		t.Fatalf("a refused attempt wrote: %d keys of c, b's record %q", n, raw.Get(ctx, hs[1]).Val())
	}
	held, err := n.Extend(ctx, ks, "t1", rec, "", fence, time.Minute)
	if err != nil || !held {
		t.Fatalf("extend: %v, %v", held, err)
	}
	for _, h := range hs {
		if ttl := raw.PTTL(ctx, h).Val(); ttl < 50*time.Second {
			t.Fatalf("%s's TTL %v after Extend(1m)", h, ttl)
		}
	}
	// b's record is a later holder's now: the release leaves it.
	raw.Set(ctx, hs[1], `{"token":"later"}`, time.Minute)
	deleted, _, err := n.Release(ctx, rnode.Release{Keys: ks, Token: "t1", Holder: rec, Fence: fence, Wake: true})
	if err != nil || deleted != 2 {
		t.Fatalf("release: %d deleted, %v", deleted, err)
	}
	if raw.Exists(ctx, "a", "b", hs[0]).Val() != 0 || raw.Get(ctx, hs[1]).Val() != `{"token":"later"}` {
		t.Fatalf("after the release: %d of a, b and a's record left, b's record %q",
			raw.Exists(ctx, "a", "b", hs[0]).Val(), raw.Get(ctx, hs[1]).Val())
	}
}
