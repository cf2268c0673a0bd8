package redlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/redlock"
)

// A stall under contention: 8 contenders on 5 nodes, everyone always wanting the
// lock. Split votes are undone at once and retried after a random pause, so
// the longest stretch in which nobody holds the lock stays a small multiple
// of the retry delay; and never do two hold it at once.
func TestEightContendersNoStall(t *testing.T) {
	const (
		contenders = 8
		retryDelay = 20 * time.Millisecond
		jitter     = 20 * time.Millisecond
		run        = 3 * time.Second
	)
	holds, longest := contend(t, contenders, run, false, nil, dlock.WithRetryDelay(retryDelay), dlock.WithRetryJitter(jitter))
	t.Logf("%d holds in %v by %d contenders; longest time unheld %v", holds, run, contenders, longest)
	if holds < 20 {
		t.Fatalf("only %d holds in %v", holds, run)
	}
	// The gap includes a release and an acquisition round under -race on a
	// loaded machine; node-redlock left the lock unheld for 1-10 s.
	if bound := 10 * (retryDelay + jitter); longest > bound {
		t.Fatalf("nobody held the lock for %v while 8 wanted it; want under %v", longest, bound)
	}
}

// Several keys are taken all or nothing: a multi-lock that meets one busy
// key takes none of them, and its fence is above every earlier fence of
// each key.
func TestMultiAllOrNothing(t *testing.T) {
	l := newLocker(t, shared)
	a, b, c := lockcheck.Key(t), lockcheck.Key(t), lockcheck.Key(t)
	var high uint64
	for range 3 {
		lock := mustAcquire(t, l, b, 10*time.Second)
		high = max(high, lock.Fence())
		lock.Release(testCtx(t))
	}
	lb := mustAcquire(t, l, b, 10*time.Second)
	_, err := l.Keys(a, b, c).TryAcquire(testCtx(t), a+","+b+","+c, 10*time.Second)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("multi over a busy key: got %v, want ErrNotAcquired", err)
	}
	for _, k := range []string{a, c} {
		if ks := keysOn(t, shared, k); len(ks) != 0 {
			t.Fatalf("refused multi-lock left %s set: %v", k, ks)
		}
	}
	high = max(high, lb.Fence())
	lb.Release(testCtx(t))

	lm, err := l.Keys(a, b, c).TryAcquire(testCtx(t), a+","+b+","+c, 10*time.Second)
	if err != nil {
		t.Fatalf("multi: %v", err)
	}
	if lm.Key() != a+","+b+","+c {
		t.Fatalf("multi Key() = %q", lm.Key())
	}
	if lm.Fence() <= high {
		t.Fatalf("multi fence %d not above %d, the last fence of %s", lm.Fence(), high, b)
	}
	for _, k := range []string{a, b, c} {
		if _, err := l.TryAcquire(testCtx(t), k, time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("%s while the multi-lock holds it: got %v, want ErrNotAcquired", k, err)
		}
	}
	if err := lm.Extend(testCtx(t), 10*time.Second); err != nil {
		t.Fatalf("multi extend: %v", err)
	}
	if err := lm.Release(testCtx(t)); err != nil {
		t.Fatalf("multi release: %v", err)
	}
	after := mustAcquire(t, l, a, time.Second)
	if after.Fence() <= lm.Fence() {
		t.Fatalf("single fence %d after the multi-lock's %d", after.Fence(), lm.Fence())
	}

	// Do and Acquire over several keys.
	var ran bool
	err = dlock.Do(testCtx(t), l.Keys(b, c), b+","+c, time.Second, func(ctx context.Context) error {
		ran = dlock.LockFromContext(ctx).Key() == b+","+c
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do over Keys: %v, ran %v", err, ran)
	}
	lm, err = dlock.Acquire(testCtx(t), l.Keys(b, c), b+","+c, time.Second, dlock.WithRetryCount(0))
	if err != nil {
		t.Fatalf("Acquire over Keys: %v", err)
	}
	lm.Release(testCtx(t))
}

// The CLI's token operations: extend and release by key and token.
func TestTokenOperations(t *testing.T) {
	l := newLocker(t, shared)
	key := lockcheck.Key(t)
	lock := mustAcquire(t, l, key, time.Second)
	if err := l.ExtendToken(testCtx(t), key, lock.Token(), 10*time.Second); err != nil {
		t.Fatalf("ExtendToken: %v", err)
	}
	ttl, _ := client(t, shared[0].Addr).PTTL(testCtx(t), key).Result()
	if ttl < 5*time.Second {
		t.Fatalf("PTTL after ExtendToken %v, want about 10s", ttl)
	}
	if err := l.ReleaseToken(testCtx(t), key, "wrong"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ReleaseToken with a wrong token: got %v, want ErrNotHeld", err)
	}
	if err := l.ExtendToken(testCtx(t), key, "wrong", time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ExtendToken with a wrong token: got %v, want ErrNotHeld", err)
	}
	if err := l.ReleaseToken(testCtx(t), key, lock.Token()); err != nil {
		t.Fatalf("ReleaseToken: %v", err)
	}
	if err := l.ReleaseToken(testCtx(t), key, lock.Token()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second ReleaseToken: got %v, want ErrNotHeld", err)
	}
	var qe *redlock.QuorumError
	if err := l.ReleaseToken(testCtx(t), key, lock.Token()); !errors.As(err, &qe) || qe.Op != "release" || qe.Got != 0 {
		t.Fatalf("ReleaseToken error %v carries no QuorumError", err)
	}
}

// contend runs n Lockers, each taking the same key with Acquire(opts) in a
// loop and holding it 2ms, for run, or until enough (if not nil), told of
// each grant (dlock.EventGranted, with its attempts and wait), reports that
// the grants so far suffice. It fails the test if two ever held it at once,
// and returns the number of holds and the longest time between one release
// and the next grant. With allowUnavailable a release that could not tell
// (dlock.ErrUnavailable) is not an error.
func contend(t *testing.T, n int, run time.Duration, allowUnavailable bool, enough func(dlock.Event) bool, opts ...dlock.Option) (holds int, longest time.Duration) {
	t.Helper()
	key := lockcheck.Key(t)
	type hold struct{ enter, exit time.Time }
	var mu sync.Mutex
	var hs []hold
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var observe []redlock.Option
	if enough != nil {
		observe = append(observe, redlock.WithObserver(func(_ context.Context, e dlock.Event) {
			if e.Kind == dlock.EventGranted && enough(e) {
				cancel()
			}
		}))
	}
	var wg sync.WaitGroup
	for range n {
		l := newLocker(t, shared, observe...)
		defer l.Close()
		wg.Go(func() {
			for ctx.Err() == nil {
				lock, err := dlock.Acquire(ctx, l, key, 2*time.Second, opts...)
				if err != nil {
					if ctx.Err() == nil && !transient(err) {
						t.Errorf("Acquire: %v", err)
					}
					continue
				}
				enter := time.Now()
				time.Sleep(2 * time.Millisecond) // the critical section
				exit := time.Now()
				if err := lock.Release(context.Background()); err != nil && !(allowUnavailable && errors.Is(err, dlock.ErrUnavailable)) {
					t.Errorf("Release: %v", err)
				}
				mu.Lock()
				hs = append(hs, hold{enter, exit})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(hs, func(a, b hold) int { return a.enter.Compare(b.enter) })
	for i := 1; i < len(hs); i++ {
		if hs[i].enter.Before(hs[i-1].exit) {
			t.Fatalf("two holders at once: %v-%v and %v-%v", hs[i-1].enter, hs[i-1].exit, hs[i].enter, hs[i].exit)
		}
		longest = max(longest, hs[i].enter.Sub(hs[i-1].exit))
	}
	return len(hs), longest
}
