package pglock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
)

var sentinels = []error{dlock.ErrNotAcquired, dlock.ErrNotHeld, dlock.ErrLockLost, dlock.ErrUnavailable, dlock.ErrInvalid}

// wantSentinel fails unless err matches want and none of dlock's other
// sentinels, and its message is one line with at most one "dlock:". Errors
// that went through a dlock.Lock carry the handle's own "dlock: op key:"
// in front: check their grant's error (see recordGrant).
func wantSentinel(t *testing.T, err, want error) {
	t.Helper()
	wantOnly(t, err, want)
	if msg := err.Error(); strings.Count(msg, "dlock:") > 1 {
		t.Fatalf("error message %q: want at most one \"dlock:\"", msg)
	}
}

// wantOnly fails unless err matches want and none of dlock's other
// sentinels, and its message is one line.
func wantOnly(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one matching %v", want)
	}
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Fatalf("error %q: errors.Is(%v) = %v; want it to match %v and no other sentinel", err, s, got, want)
		}
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") {
		t.Fatalf("error message %q: want one line", msg)
	}
}

// recordedGrant is a pglock grant inside a dlock.Lock built by the test,
// remembering the grant's last error as the grant returned it.
type recordedGrant struct {
	dlock.Grant
	err error
}

func (r *recordedGrant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	until, err := r.Grant.Extend(ctx, ttl)
	r.err = err
	return until, err
}

func (r *recordedGrant) Release(ctx context.Context) error {
	r.err = r.Grant.Release(ctx)
	return r.err
}

// recordGrant takes the lock on key with l, as TryAcquire would, and
// returns the handle and its recorded grant.
func recordGrant(t *testing.T, l *pglock.Locker, key string, ttl time.Duration) (*dlock.Lock, *recordedGrant) {
	t.Helper()
	g, fence, validUntil, err := l.TryAcquireGrant(testCtx(t), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	rg := &recordedGrant{Grant: g}
	lock := dlock.NewLock(key, dlock.NewToken(), fence, validUntil, rg)
	t.Cleanup(func() { lock.Release(context.Background()) })
	return lock, rg
}
