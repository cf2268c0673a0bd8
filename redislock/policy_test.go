package redislock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/wake"
	"github.com/dlock-go/dlock/redislock"
)

// Tests of the hand-off policy (notify.go): a holder may re-take the lock
// while the queue's head is young (barging), a head that has waited T is
// woken and served, nobody starves, and a woken head that is gone holds
// the others off no longer than the reservation.

var longPoll = []dlock.Option{dlock.WithRetryDelay(time.Minute), dlock.WithRetryJitter(0)}

// policyLocker returns a Locker on its own client with hand-off threshold
// handoff and reservation reserve.
func policyLocker(t *testing.T, handoff, reserve time.Duration) *redislock.Locker {
	l := newLocker(t, shared.Client(t))
	l.SetPolicy(handoff, reserve)
	closeLocker(t, l)
	return l
}

// subscribe makes l's subscription confirmed: l waits once for a lock that
// another Locker holds and releases.
func subscribe(t *testing.T, l, other *redislock.Locker) {
	t.Helper()
	key := locktest.Key(t) + ":sub"
	lock, err := other.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := waitFor(testCtx(t), l, key, longPoll...)
	waitQueued(t, shared.Client(t), key, 1)
	handOff(t, lock, done)
}

// queueHead returns the Locker id at the head of key's queue, "" if none.
func queueHead(t *testing.T, raw redis.UniversalClient, key string) string {
	t.Helper()
	ids, err := raw.ZRange(testCtx(t), wake.QueueKey(key), 0, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// retake is a holder's waiting Acquire of key (a loop over a lock), cut
// short if its first attempt fails.
func retake(t *testing.T, h *redislock.Locker, key string) (*dlock.Lock, error) {
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	return h.Acquire(ctx, key, 10*time.Second, longPoll...)
}

// barge leaves the lock on key free without a hand-off (a plain DEL, as a
// release that found the head young would) and has h take it over the
// waiting head, n times, releasing each time.
func barge(t *testing.T, raw redis.UniversalClient, h *redislock.Locker, key string, n int) {
	t.Helper()
	if err := raw.Del(testCtx(t), key).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		lock, err := retake(t, h, key)
		if err != nil {
			t.Fatalf("re-take %d over a young head: %v", i, err)
		}
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// (a) While the head has headed the queue for less than T, a holder
// re-takes the lock again and again: its releases do not wake the head.
func TestBargingWhileHeadYoung(t *testing.T) {
	raw := shared.Client(t)
	const T = time.Minute
	h, w := policyLocker(t, T, 10*time.Second), policyLocker(t, T, 10*time.Second)
	subscribe(t, h, w)
	key := locktest.Key(t)
	lock, err := h.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = lock // dropped: barge frees the key by hand
	done := waitFor(testCtx(t), w, key, longPoll...)
	waitQueued(t, raw, key, 1)
	head := queueHead(t, raw, key)

	barge(t, raw, h, key, 20)
	select {
	case got := <-done:
		t.Fatalf("the young head was served (err %v) while the holder re-took the lock: it was woken", got.err)
	case <-time.After(100 * time.Millisecond):
	}
	if got := queueHead(t, raw, key); got != head {
		t.Fatalf("queue head %q after the re-takes, want the waiter %q still queued", got, head)
	}
}

// (b) Once the head has waited T, the next release wakes it, the free lock
// is reserved for it (the releaser's immediate re-take is refused), and it
// gets the lock within about a round trip.
func TestOldHeadIsServed(t *testing.T) {
	raw := shared.Client(t)
	const T = 100 * time.Millisecond
	h, w := policyLocker(t, T, 10*time.Second), policyLocker(t, T, 10*time.Second)
	subscribe(t, h, w)
	key := locktest.Key(t)
	if _, err := h.TryAcquire(testCtx(t), key, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	done := waitFor(testCtx(t), w, key, longPoll...)
	waitQueued(t, raw, key, 1)
	queued := time.Now()

	// The holder re-takes the lock over the young head until a release
	// hands it on: that is the first release after the head's T is up.
	if err := raw.Del(testCtx(t), key).Err(); err != nil {
		t.Fatal(err)
	}
	var lastRelease time.Time
	retakes := 0
	for {
		lock, err := retake(t, h, key)
		if errors.Is(err, dlock.ErrNotAcquired) {
			break // refused: the release before handed the lock on
		}
		if err != nil {
			t.Fatal(err)
		}
		retakes++
		if time.Since(queued) > T+5*time.Second {
			t.Fatalf("the head was not served %v after it queued (T %v)", time.Since(queued), T)
		}
		lastRelease = time.Now()
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.lock.Release(context.Background())
	waited, lat := got.at.Sub(queued), got.at.Sub(lastRelease)
	t.Logf("%d re-takes, head served after %v (T %v), %v after the release that woke it", retakes, waited, T, lat)
	if retakes < 2 {
		t.Fatalf("%d re-takes before the hand-off: the young head was woken at once", retakes)
	}
	if waited < T/2 {
		t.Fatalf("head served after %v, before its T of %v", waited, T)
	}
	if lat > time.Second {
		t.Fatalf("the woken head took %v to get the lock", lat)
	}
}

// (b2) A loop whose woken waiter was quicker still barges. The holder's
// release (a short hold) wakes the head, the head takes the lock before
// the holder's next attempt arrives, and that attempt, coming back at once
// after its release, is refused by the head's lock rather than by the
// reservation. It marks the lock as being re-taken at once all the same,
// so the next release defers the young head behind it instead of waking
// it, and the releaser re-takes the free lock. (Without the mark every
// such race cost a hand-off: in bench C1 15-24% of acquisitions were.)
func TestLoopLosingTheRaceStillBarges(t *testing.T) {
	raw := shared.Client(t)
	const T = time.Minute // every head stays young
	h, w, w2 := policyLocker(t, T, 10*time.Second), policyLocker(t, T, 10*time.Second), policyLocker(t, T, 10*time.Second)
	for _, l := range []*redislock.Locker{h, w} {
		l.SetDirectAfter(time.Hour) // every hold is short: its release reserves
	}
	h.SetBackAtOnce(5 * time.Second) // the test's steps take milliseconds, a loop's microseconds
	subscribe(t, h, w2)
	key := locktest.Key(t)
	lock, err := h.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wDone := waitFor(testCtx(t), w, key, longPoll...)
	waitQueued(t, raw, key, 1)
	ctx2, cancel2 := context.WithCancel(testCtx(t))
	w2Done := waitFor(ctx2, w2, key, longPoll...)
	defer func() {
		cancel2()
		if got := <-w2Done; got.err == nil {
			got.lock.Release(context.Background())
		}
	}()
	waitQueued(t, raw, key, 2)

	// h's release (a short hold) wakes w, and w takes the lock before h
	// comes back.
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := <-wDone
	if got.err != nil {
		t.Fatal(got.err)
	}
	if _, err := retake(t, h, key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("h's attempt while w holds the lock: %v, want ErrNotAcquired", err)
	}
	// w releases: the young head w2 is deferred, not woken, and the lock
	// is free for w's re-take.
	if err := got.lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if v := raw.Get(testCtx(t), key).Val(); v != "" {
		t.Fatalf("after w's release the key holds %q: the young head was woken, want the lock left free", v)
	}
	again, err := w.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatalf("w's re-take after its release: %v", err)
	}
	defer again.Release(context.Background())
	select {
	case got := <-w2Done:
		t.Fatalf("the young head got the lock (err %v) while the loop re-took it", got.err)
	default:
	}
}

// (c) Eight Lockers re-take one lock in a tight loop (hold 0), with a poll
// interval far beyond the test, so a waiter gets the lock only through the
// hand-off policy. Everyone gets the lock, and no wait comes near the test's
// length.
func TestNoStarvationTightLoop(t *testing.T) {
	const lockers, run = 8, time.Second
	key := locktest.Key(t)
	ctx, cancel := context.WithTimeout(testCtx(t), run)
	defer cancel()
	var mu sync.Mutex
	counts := make([]int, lockers)
	var waits []time.Duration
	var wg sync.WaitGroup
	for i := range lockers {
		l := newLocker(t, shared.Client(t))
		closeLocker(t, l)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := time.Now()
				lock, err := l.Acquire(ctx, key, 10*time.Second, longPoll...)
				if err != nil {
					return // the run is over
				}
				mu.Lock()
				counts[i]++
				waits = append(waits, time.Since(start))
				mu.Unlock()
				if err := lock.Release(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(waits)
	worst := waits[len(waits)-1]
	t.Logf("acquisitions per Locker %v; waits p50 %v, p99 %v, max %v", counts, waits[len(waits)/2], waits[len(waits)*99/100], worst)
	for i, c := range counts {
		if c == 0 {
			t.Fatalf("Locker %d never got the lock in %v of a tight loop (counts %v)", i, run, counts)
		}
	}
	if worst > run/2 {
		t.Fatalf("a wait took %v: waiters are not served by hand-offs", worst)
	}
}

// (d) A woken head that is gone holds the others off for at most the
// reservation R (which refuses every client's SET NX): a crashed Locker (an id
// in the queue that nobody answers for) delays the next waiter by about R, and
// a live Locker that no longer waits (its waiter gave up) passes the
// reservation on at once.
func TestGoneHeadBounded(t *testing.T) {
	raw := shared.Client(t)
	const R = 400 * time.Millisecond
	t.Run("Crashed", func(t *testing.T) {
		h, w := policyLocker(t, time.Millisecond, R), policyLocker(t, time.Millisecond, R)
		key := locktest.Key(t)
		lock, err := h.TryAcquire(testCtx(t), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The crashed Locker queued first.
		if err := raw.ZAdd(testCtx(t), wake.QueueKey(key), redis.Z{Score: 1, Member: "crashed"}).Err(); err != nil {
			t.Fatal(err)
		}
		done := waitFor(testCtx(t), w, key, dlock.WithRetryDelay(50*time.Millisecond), dlock.WithRetryJitter(0))
		waitQueued(t, raw, key, 2)
		start := time.Now()
		if err := lock.Release(testCtx(t)); err != nil { // wakes "crashed"
			t.Fatal(err)
		}
		// Meanwhile a newcomer is told why a free lock refuses it.
		if _, err := h.TryAcquire(testCtx(t), key, 10*time.Second); !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "reserved") {
			t.Fatalf("TryAcquire during the reservation: got %v, want ErrNotAcquired saying the lock is reserved", err)
		}
		// The reservation is in the lock key, so it refuses the plain SET
		// NX of other clients (redsync, node-redlock) too.
		if ok, err := raw.SetNX(testCtx(t), key, "another-client", 10*time.Second).Result(); err != nil || ok {
			t.Fatalf("SET NX during the reservation: got %v, %v; want refused", ok, err)
		}
		if v := raw.Get(testCtx(t), key).Val(); v != "dlock:reserved:crashed" {
			t.Fatalf("lock key during the reservation holds %q, want dlock:reserved:crashed", v)
		}
		got := <-done
		if got.err != nil {
			t.Fatal(got.err)
		}
		defer got.lock.Release(context.Background())
		d := got.at.Sub(start)
		t.Logf("next waiter served %v after the release (R %v, poll 50ms)", d, R)
		if d < R/2 {
			t.Fatalf("served after %v: the crashed head's reservation of %v was not respected", d, R)
		}
		if d > R+2*time.Second {
			t.Fatalf("served after %v: a crashed head held the lock off beyond its reservation of %v", d, R)
		}
	})
	t.Run("GaveUp", func(t *testing.T) {
		h, w, g := policyLocker(t, time.Millisecond, time.Minute), policyLocker(t, time.Millisecond, time.Minute), policyLocker(t, time.Millisecond, time.Minute)
		// g waits for another key, so it is subscribed; its id, put at
		// the front of key's queue, is a head whose waiter is gone.
		other := locktest.Key(t) + ":other"
		olock, err := h.TryAcquire(testCtx(t), other, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(testCtx(t))
		gdone := waitFor(ctx, g, other, longPoll...)
		waitQueued(t, raw, other, 1)
		gid := queueHead(t, raw, other)
		defer func() {
			cancel()
			<-gdone
			olock.Release(context.Background())
		}()

		key := locktest.Key(t)
		lock, err := h.TryAcquire(testCtx(t), key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := raw.ZAdd(testCtx(t), wake.QueueKey(key), redis.Z{Score: 1, Member: gid}).Err(); err != nil {
			t.Fatal(err)
		}
		done := waitFor(testCtx(t), w, key, longPoll...)
		waitQueued(t, raw, key, 2)
		d := handOff(t, lock, done)
		t.Logf("next waiter served %v after the release (reservation %v)", d, time.Minute)
		if d > 5*time.Second {
			t.Fatalf("served after %v: the woken Locker did not pass its reservation on", d)
		}
	})
}
