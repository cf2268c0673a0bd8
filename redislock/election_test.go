package redislock_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/locktest"
	"github.com/dlock-go/dlock/redislock"
)

func TestElection(t *testing.T) {
	raw := shared.Client(t)
	t.Run("Plain", func(t *testing.T) { locktest.RunElection(t, sharedFactory(), delLapse(raw)) })
	t.Run("HolderInfo", func(t *testing.T) {
		locktest.RunElection(t, sharedFactory(redislock.WithHolderInfo("conformance")), delLapse(raw))
	})
}

// A leader's record outlives its lock when the key goes without a release
// (deleted, evicted, failed over): the next holder, a bare lock that
// publishes nothing, is then reported with its own fence and no name, not
// under the old leader's identity.
func TestLeaderIgnoresAnEarlierHoldersRecord(t *testing.T) {
	ctx := testCtx(t)
	raw := shared.Client(t)
	l := newLocker(t, raw)
	name := lockcheck.Key(t)
	err := dlock.Lead(ctx, l, name, 10*time.Second, func(ctx context.Context) error {
		if err := raw.Del(ctx, name).Err(); err != nil {
			t.Fatal(err)
		}
		bare, err := l.TryAcquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer bare.Release(ctx)
		if n, _ := raw.Exists(ctx, keys.Holder(name)).Result(); n != 1 {
			t.Fatalf("the leader's record is gone: the test shows nothing")
		}
		got, err := dlock.Leader(ctx, l, name)
		if err != nil || !got.Led || got.Leader != "" || got.Fence != bare.Fence() {
			t.Fatalf("Leader: %+v, %v; want the bare lock's term %d, unnamed", got, err, bare.Fence())
		}
		return nil
	}, dlock.WithIdentity("old-leader"), dlock.WithRecampaign(false))
	lockcheck.WantError(t, err, dlock.ErrNotHeld) // its key was taken away
}

// A lock taken with WithHolderInfo (dlock run's) is reported as led by its
// holder's host:pid, with its fence.
func TestLeaderNamesAHolderInfoLock(t *testing.T) {
	ctx := testCtx(t)
	l := newLocker(t, shared.Client(t), redislock.WithHolderInfo("svc"))
	name := lockcheck.Key(t)
	lock, err := l.TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	host, _ := os.Hostname()
	want := host + ":" + strconv.Itoa(os.Getpid())
	got, err := dlock.Leader(ctx, newLocker(t, shared.Client(t)), name)
	if err != nil || got.Leader != want || got.Fence != lock.Fence() || got.Since.IsZero() {
		t.Fatalf("Leader: %+v, %v; want %s in term %d", got, err, want, lock.Fence())
	}
}
