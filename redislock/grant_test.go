package redislock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// scriptCalls returns how many scripts the server has run (EVALSHA and
// EVAL, from INFO commandstats).
func scriptCalls(t *testing.T, raw redis.UniversalClient) int {
	t.Helper()
	info, err := raw.Info(testCtx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
		}
	}
	return total
}

// releaseToWaiter releases lock and waits for the waiter behind done. It
// returns the waiter's lock (released when t ends), how many scripts the
// server ran from the release to it, and when the release began.
func releaseToWaiter(t *testing.T, raw redis.UniversalClient, lock *dlock.Lock, done <-chan acquired) (got acquired, calls int, released time.Time) {
	t.Helper()
	before := scriptCalls(t, raw)
	released = time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got = <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Cleanup(func() { got.lock.Release(context.Background()) })
	return got, scriptCalls(t, raw) - before, released
}

// loadScripts has the server load the acquire and release scripts, so that
// no call counted by scriptCalls needs a second one (EVALSHA, NOSCRIPT,
// EVAL).
func loadScripts(t *testing.T, l *redislock.Locker, key string) {
	t.Helper()
	lock, err := l.TryAcquire(testCtx(t), key+"-warm-up", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(testCtx(t), key+"-warm-up", time.Second); err == nil {
		t.Fatal("a second TryAcquire of a held key succeeded")
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// A release after a hold of a few ms grants the lock to the queued waiter
// itself: the waiter's Acquire returns without another call to the server,
// with the token the key holds, the next fence, and a validity counted from
// before it queued. A release right after the acquisition (a holder that
// loops) reserves the lock instead, and the waiter takes it with one more
// round trip. (A holder's threshold, directAfter, is 1ms; here it is an
// hour for the second case, so that a slow machine cannot blur the two.)
func TestDirectGrant(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	holder := newLocker(t, srv.Client(t))
	waiter := newLocker(t, srv.Client(t))
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := locktest.Key(t)
	const ttl = 10 * time.Second
	loadScripts(t, holder, key)
	for _, tc := range []struct {
		name   string
		direct time.Duration // the holder's directAfter
		calls  int           // scripts run from the release to the waiter's lock
	}{{"after a hold", time.Millisecond, 1}, {"hold 0", time.Hour, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			holder.SetDirectAfter(tc.direct)
			if err := raw.Set(testCtx(t), key, "another owner", ttl).Err(); err != nil {
				t.Fatal(err)
			}
			waitStart := time.Now()
			done := waitFor(testCtx(t), waiter, key, slowPoll...)
			waitQueued(t, raw, key, 1)
			// The other owner lets go without a word; holder takes the
			// lock before the waiter's next poll, 5s away.
			if err := raw.Del(testCtx(t), key).Err(); err != nil {
				t.Fatal(err)
			}
			lock, err := holder.TryAcquire(testCtx(t), key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
			got, calls, released := releaseToWaiter(t, raw, lock, done)
			if calls != tc.calls {
				t.Errorf("%d scripts ran from the release to the waiter's lock, want %d", calls, tc.calls)
			}
			if v := raw.Get(testCtx(t), key).Val(); v != got.lock.Token() {
				t.Errorf("key holds %q, the waiter's lock has token %q", v, got.lock.Token())
			}
			if got.lock.Fence() != lock.Fence()+1 {
				t.Errorf("waiter's fence %d after the holder's %d, want the next one", got.lock.Fence(), lock.Fence())
			}
			if vu := got.lock.ValidUntil(); vu.After(waitStart.Add(ttl)) || vu.Before(released.Add(ttl/2)) {
				t.Errorf("waiter's lock valid until %v after it began waiting, want within (%v, %v]",
					vu.Sub(waitStart), released.Sub(waitStart)+ttl/2, ttl)
			}
		})
	}
}

// The queue's head has no listener any more (its subscription was cut and
// may not come back): the release skips it and grants the lock to the next
// Locker in the queue, instead of leaving it to a Locker that cannot learn
// of it.
func TestGrantSkipsLockerNotListening(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	ctx := testCtx(t)
	holder, gone, next := newLocker(t, srv.Client(t)), newLocker(t, userClient(t, srv, "gone")), newLocker(t, srv.Client(t))
	holder.SetDirectAfter(0) // every release may grant directly, however short the hold
	for _, l := range []*redislock.Locker{holder, gone, next} {
		closeLocker(t, l)
	}
	key := locktest.Key(t)
	lock, err := holder.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	poll := []dlock.Option{dlock.WithRetryDelay(5 * time.Second), dlock.WithRetryJitter(0)}
	goneDone := waitFor(ctx, gone, key, poll...)
	waitQueued(t, raw, key, 1)
	nextDone := waitFor(ctx, next, key, poll...)
	waitQueued(t, raw, key, 2)
	if err := raw.Do(ctx, "ACL", "SETUSER", "gone", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, "CLIENT", "KILL", "USER", "gone").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var got acquired
	select {
	case got = <-nextDone:
	case got = <-goneDone:
		t.Fatalf("the Locker that was not listening got the lock first (%v)", got.err)
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if d := got.at.Sub(start); d > time.Second {
		t.Fatalf("the next Locker got the lock %v after the release, with a 5s poll", d)
	}
	if err := got.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got = <-goneDone; got.err != nil { // by polling, once the key is free
		t.Fatal(got.err)
	}
	got.lock.Release(ctx)
}

// grantBehindProxy queues waiter (whose client goes through proxy, polling
// every 5s) for key, holds the replies to it, releases holder's lock and
// checks that the release granted the lock directly: the key holds a
// token, not a reservation.
func grantBehindProxy(ctx context.Context, t *testing.T, raw redis.UniversalClient, proxy *testproxy.Proxy, holder, waiter *redislock.Locker, key string) <-chan acquired {
	t.Helper()
	lock, done := queueBehind(ctx, t, raw, holder, waiter, key)
	proxy.HoldReplies(t)
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if v := raw.Get(testCtx(t), key).Val(); v == "" || v == lock.Token() || strings.HasPrefix(v, "dlock:reserved:") {
		t.Fatalf("after the release the key holds %q, want the waiter's token", v)
	}
	return done
}

// F24: the announcement of a direct grant is lost with the waiter's
// connections. The lock is the waiter's all the same: its Locker
// resubscribes, retries, finds the key holding its token and takes it,
// long before the lock's TTL or the next poll.
func TestLostGrantAnnouncement(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	// The cut also kills the waiter's idle pooled connections; its retry
	// may pick one before it has noticed, so the client retries once on a
	// fresh connection, as dlock's CLI configures it (without, the retry
	// fails with ErrUnavailable: EOF about once in 40 runs).
	wc, proxy := proxiedClient(t, srv, 1)
	holder, waiter := newLocker(t, srv.Client(t)), newLocker(t, wc)
	holder.SetDirectAfter(0) // every release may grant directly, however short the hold
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := locktest.Key(t)
	done := grantBehindProxy(testCtx(t), t, raw, proxy, holder, waiter, key)
	granted := raw.Get(testCtx(t), key).Val()
	start := time.Now()
	proxy.Cut(t)
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.lock.Release(context.Background())
	if d := got.at.Sub(start); d > 3*time.Second {
		t.Fatalf("waiter took %v after its grant's announcement was lost (TTL 10s, poll 5s)", d)
	}
	if got.lock.Token() != granted {
		t.Fatalf("waiter's lock has token %q, the grant was to %q", got.lock.Token(), granted)
	}
}

// A grant whose Locker gives up before it learns of it (its waiter's
// context ends, or the Locker is closed, while the announcement is on its
// way or lost) is given back: the next Locker in the queue gets the lock at
// once, not after the TTL. The grant is made here as the release script
// makes it, without the announcement.
func TestUnusedGrantGivenBack(t *testing.T) {
	for _, giveUp := range []string{"context ends", "Close"} {
		t.Run(giveUp, func(t *testing.T) {
			raw := shared.Client(t)
			holder, quitter, next := newLocker(t, shared.Client(t)), newLocker(t, shared.Client(t)), newLocker(t, shared.Client(t))
			for _, l := range []*redislock.Locker{holder, quitter, next} {
				closeLocker(t, l)
			}
			key := locktest.Key(t)
			lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			poll := []dlock.Option{dlock.WithRetryDelay(5 * time.Second), dlock.WithRetryJitter(0)}
			quitDone := waitFor(ctx, quitter, key, poll...)
			waitQueued(t, raw, key, 1)
			nextDone := waitFor(testCtx(t), next, key, poll...)
			waitQueued(t, raw, key, 2)

			// quitter's registration: its id heads the queue, its token is
			// in the queue's state.
			queue, state := "dlock:waiters:{"+key+"}", "dlock:turn:{"+key+"}"
			id := raw.ZRange(testCtx(t), queue, 0, 0).Val()[0]
			token := raw.HGet(testCtx(t), state, "g"+id).Val()
			if token == "" {
				t.Fatalf("the queue's head %s registered no token", id)
			}
			// The grant (queue.lua's wake): the holder's lock gives way to it.
			if n, err := raw.Eval(testCtx(t), `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('zrem', KEYS[2], ARGV[3])
redis.call('hdel', KEYS[3], 'g' .. ARGV[3], 'l' .. ARGV[3])
redis.call('set', KEYS[1], ARGV[2], 'px', 10000)
return 1`, []string{key, queue, state}, lock.Token(), token, id).Int(); err != nil || n != 1 {
				t.Fatalf("granting to quitter: %v, %v", n, err)
			}
			start := time.Now()
			if giveUp == "Close" {
				quitter.Close() // its wait goes on, polling every 5s
			} else {
				cancel()
				if got := <-quitDone; got.err == nil {
					t.Fatal("quitter got the lock after its context ended")
				}
			}
			got := <-nextDone
			if got.err != nil {
				t.Fatal(got.err)
			}
			if d := got.at.Sub(start); d > 2*time.Second {
				t.Fatalf("next Locker got the lock %v after quitter gave up its grant (TTL 10s, poll 5s)", d)
			}
			if err := got.lock.Release(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if giveUp == "Close" {
				cancel()
				if got := <-quitDone; got.err == nil {
					got.lock.Release(testCtx(t))
				}
			}
		})
	}
}

// A waiter granted the lock after waiting more than half its TTL renews the
// key before it returns (one round trip): its validity is counted from the
// renewal, not from when it began waiting, and still ends before the key
// expires.
func TestDirectGrantAfterLongWait(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	holder := newLocker(t, srv.Client(t))
	waiter := newLocker(t, srv.Client(t))
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := locktest.Key(t)
	loadScripts(t, holder, key)
	const ttl = 2 * time.Second
	lock, err := holder.TryAcquire(testCtx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan acquired, 1)
	go func() {
		l, err := waiter.Acquire(testCtx(t), key, ttl, slowPoll...)
		done <- acquired{l, err, time.Now()}
	}()
	waitQueued(t, raw, key, 1)
	time.Sleep(ttl/2 + 100*time.Millisecond)
	got, calls, released := releaseToWaiter(t, raw, lock, done)
	if calls != 2 {
		t.Errorf("%d scripts ran from the release to the waiter's lock, want 2 (the release, the renewal)", calls)
	}
	vu := got.lock.ValidUntil()
	if vu.Before(released.Add(ttl * 8 / 10)) {
		t.Errorf("waiter's lock valid for %v after the release, want most of its %v TTL", vu.Sub(released), ttl)
	}
	pttl := raw.PTTL(testCtx(t), key).Val()
	if deadline := time.Now().Add(pttl); vu.After(deadline) {
		t.Errorf("waiter's lock valid until %v after the key expires", vu.Sub(deadline))
	}
}

// Lockers with several local waiters each, waits given up at random
// (contexts ending mid-hand-off, and mid-attempt), holds long enough for
// direct grants, and TryAcquire calls in between: never two holders, the
// key holds the holder's token for the whole hold, every release finds its
// lock, fences increase from holder to holder, and no grant is left to
// nobody (the key would be held for its 5s TTL).
func TestDirectGrantTorture(t *testing.T) {
	const lockers, perLocker = 4, 3
	run := 3 * time.Second
	if testing.Short() {
		run = time.Second
	}
	raw := shared.Client(t)
	key := locktest.Key(t)
	var (
		mu        sync.Mutex
		holder    string // token of the current holder
		lastFence uint64
		acquired  int
		gaveUp    int
		lastFree  = time.Now() // when the lock was last released
		maxFree   time.Duration
	)
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for i := range lockers {
		l := newLocker(t, shared.Client(t))
		closeLocker(t, l)
		for j := range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(j)))
				for time.Now().Before(deadline) {
					var lock *dlock.Lock
					var err error
					if rng.IntN(8) == 0 {
						lock, err = l.TryAcquire(testCtx(t), key, 5*time.Second)
					} else {
						ctx, cancel := context.WithTimeout(testCtx(t), time.Duration(1+rng.IntN(30))*time.Millisecond)
						lock, err = l.Acquire(ctx, key, 5*time.Second, dlock.WithRetryDelay(20*time.Millisecond))
						cancel()
					}
					if err != nil {
						if !errors.Is(err, dlock.ErrNotAcquired) {
							t.Errorf("acquire: %v", err)
							return
						}
						mu.Lock()
						gaveUp++
						mu.Unlock()
						continue
					}
					mu.Lock()
					if holder != "" {
						t.Errorf("two holders: %s and %s", holder, lock.Token())
					}
					if lock.Fence() <= lastFence {
						t.Errorf("fence %d after %d", lock.Fence(), lastFence)
					}
					holder, lastFence = lock.Token(), lock.Fence()
					maxFree = max(maxFree, time.Since(lastFree))
					acquired++
					mu.Unlock()
					time.Sleep(time.Duration(1000+rng.IntN(1000)) * time.Microsecond)
					if v := raw.Get(testCtx(t), key).Val(); v != lock.Token() {
						t.Errorf("holder %s: the key holds %q", lock.Token(), v)
					}
					mu.Lock()
					holder = ""
					mu.Unlock()
					if err := lock.Release(testCtx(t)); err != nil {
						t.Errorf("release: %v", err)
						return
					}
					mu.Lock()
					lastFree = time.Now()
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d acquisitions, %d waits given up or refused, in %v; the lock was free for %v at most", acquired, gaveUp, run, maxFree)
	if maxFree > time.Second {
		t.Errorf("the lock was free, or held by nobody, for %v (TTL 5s): a grant nobody took?", maxFree)
	}
	if acquired < 100 {
		t.Fatalf("only %d acquisitions in %v", acquired, run)
	}
}

// An attempt that registered the Locker's token but whose reply came too
// late (its context ended) leaves the token with the Locker's other
// waiters: a release that grants the lock to it then serves one of them,
// not nobody (which would hold the key for its TTL).
func TestGrantAfterFailedAttempt(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	wc, proxy := proxiedClient(t, srv, -1)
	holder, waiter := newLocker(t, srv.Client(t)), newLocker(t, wc)
	holder.SetDirectAfter(0) // every release may grant directly, however short the hold
	closeLocker(t, holder)
	closeLocker(t, waiter)
	key := locktest.Key(t)
	lock, done := queueBehind(testCtx(t), t, raw, holder, waiter, key)

	proxy.Latency(t, 200*time.Millisecond, 0)
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	_, err := waiter.TryAcquire(ctx, key, 10*time.Second) // registers, then times out
	cancel()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire whose reply is late: %v, want a deadline error", err)
	}
	start := time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if v := raw.Get(testCtx(t), key).Val(); v == "" || strings.HasPrefix(v, "dlock:reserved:") {
		t.Fatalf("after the release the key holds %q, want the waiter's token", v)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.lock.Release(context.Background())
	if d := got.at.Sub(start); d > 2*time.Second {
		t.Fatalf("the waiter got the lock %v after the release (poll 5s, TTL 10s)", d)
	}
}
