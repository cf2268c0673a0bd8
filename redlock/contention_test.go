package redlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
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
//
// A stretch starts when a Release returns nil (the key is gone from a
// majority) and ends at the next grant. Two kinds of stretch are not
// measured, both seen on a loaded machine, where they are not a stall: one
// after a release that could not reach a majority within the node timeout
// (dlock.ErrUnavailable), and one in which the test process did not run
// for a while (a pause). Either can leave the key on the nodes until its
// 2s TTL: requests that outlive the node timeout because the process was
// not running do not delete it (a release's, or an attempt's undo). The
// test runs 3s, and on until enough releases reached a majority. A stall
// of the lock (say, split votes left on the nodes) keeps it unheld while
// the process runs, and fails it.
func TestEightContendersNoStall(t *testing.T) {
	const (
		contenders = 8
		retryDelay = 20 * time.Millisecond
		jitter     = 20 * time.Millisecond
		run        = 3 * time.Second  // at least
		want       = 100              // releases that reached a majority, at least
		deadline   = 30 * time.Second // at most
	)
	var released atomic.Int64
	start := time.Now()
	enough := func(e dlock.Event) bool {
		return e.Kind == dlock.EventReleased && e.Err == nil && released.Add(1) >= want && time.Since(start) >= run
	}
	stop := watchPauses()
	holds := contend(t, contenders, deadline, true, enough, dlock.WithRetryDelay(retryDelay), dlock.WithRetryJitter(jitter))
	paused := stop()
	var longest time.Duration
	n, unavailable, inPause := 0, 0, 0
	for i := 1; i < len(holds); i++ {
		prev, next := holds[i-1], holds[i]
		switch {
		case prev.err != nil:
			unavailable++
		case paused.during(prev.released, next.enter):
			inPause++
		default:
			n++
			longest = max(longest, next.enter.Sub(prev.released))
		}
	}
	t.Logf("%d holds in %v by %d contenders (%d pauses, %v in all); longest time unheld %v in %d stretches, not counting %d after an unavailable release and %d with a pause",
		len(holds), time.Since(start).Round(time.Millisecond), contenders, len(paused), paused.total().Round(time.Millisecond), longest, n, unavailable, inPause)
	if n < want/2 {
		t.Fatalf("only %d stretches between a release and the next grant measured in %v, want %d", n, deadline, want/2)
	}
	// The stretch includes an acquisition round under -race on a loaded
	// machine; node-redlock left the lock unheld for 1-10 s.
	if bound := 10 * (retryDelay + jitter); longest > bound {
		t.Fatalf("nobody held the lock for %v while 8 wanted it; want under %v", longest, bound)
	}
}

// pauses are the stretches in which the test process did not run: stopped
// (SIGSTOP), or starved of CPU on a machine busier than its cores.
type pauses []struct{ from, to time.Time }

// watchPauses records, until stop, each time a goroutine sleeping a
// millisecond at a time woke more than 50ms late: the process (its Go
// scheduler) did not run meanwhile, so neither did the contenders.
func watchPauses() (stop func() pauses) {
	const tick, late = time.Millisecond, 50 * time.Millisecond
	done, out := make(chan struct{}), make(chan pauses)
	go func() {
		var ps pauses
		for prev := time.Now(); ; {
			select {
			case <-done:
				out <- ps
				return
			case now := <-time.After(tick):
				if now.Sub(prev) > tick+late {
					ps = append(ps, struct{ from, to time.Time }{prev.Add(tick), now})
				}
				prev = now
			}
		}
	}()
	return func() pauses {
		close(done)
		return <-out
	}
}

// during reports whether the process was paused between from and to.
func (ps pauses) during(from, to time.Time) bool {
	for _, p := range ps {
		if p.from.Before(to) && p.to.After(from) {
			return true
		}
	}
	return false
}

func (ps pauses) total() time.Duration {
	var d time.Duration
	for _, p := range ps {
		d += p.to.Sub(p.from)
	}
	return d
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

// A hold is one contender's time with the lock: from the grant (enter) to
// the call of Release (exit), and when Release returned (released), with
// its error.
type hold struct {
	enter, exit, released time.Time
	err                   error
}

// contend runs n Lockers, each taking the same key with Acquire(opts) in a
// loop and holding it 2ms, for run, or until enough (if not nil), told of
// each of their events (dlock.Event), reports that the events so far
// suffice. It fails the test if two ever held it at once, and returns the
// holds in the order of their grants. With allowUnavailable a release that
// could not tell (dlock.ErrUnavailable) is not an error.
func contend(t *testing.T, n int, run time.Duration, allowUnavailable bool, enough func(dlock.Event) bool, opts ...dlock.Option) []hold {
	t.Helper()
	key := lockcheck.Key(t)
	var mu sync.Mutex
	var hs []hold
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var observe []redlock.Option
	if enough != nil {
		observe = append(observe, redlock.WithObserver(func(_ context.Context, e dlock.Event) {
			if enough(e) {
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
				err = lock.Release(context.Background())
				if err != nil && !(allowUnavailable && errors.Is(err, dlock.ErrUnavailable)) {
					t.Errorf("Release: %v", err)
				}
				mu.Lock()
				hs = append(hs, hold{enter, exit, time.Now(), err})
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
	}
	return hs
}
