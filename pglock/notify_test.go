package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/pglock"
)

const notifyChannel = "dlock_release" // as the package sends it

// counting counts a Locker's attempts, passing its release notifications
// through, so a test can wait until a waiter has made its retry after its
// listener started and is left with nothing but the NOTIFY (or its poll).
type counting struct {
	*pglock.Locker
	attempts atomic.Int32
}

func (c *counting) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	defer c.attempts.Add(1)
	return c.Locker.TryAcquire(ctx, key, ttl)
}

// waitParked starts an Acquire of key through c with a 5s poll and returns
// its outcome channel once the waiter has made its first attempt and the
// retry that its listener's start triggers: from then on only a NOTIFY
// wakes it before its poll.
func waitParked(t *testing.T, c *counting, key string) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		lb, err := dlock.Acquire(testCtx(t), c, key, 10*time.Second,
			dlock.WithRetryDelay(5*time.Second), dlock.WithRetryJitter(time.Millisecond))
		if err == nil {
			err = lb.Release(context.Background())
		}
		got <- err
	}()
	waitFor(t, "the waiter to park", func() bool { return c.attempts.Load() >= 2 && waitKeyHolders(t) >= 1 })
	return got
}

// waitKeyHolders counts the sessions holding pglock.WaitKey in share mode:
// release listeners of Lockers with waiters.
func waitKeyHolders(t *testing.T) int {
	t.Helper()
	locks, err := shared.AdvisoryLocks(testCtx(t))
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	n := 0
	for _, a := range locks {
		if a.ObjSubID == 1 && a.Int64() == pglock.WaitKey && a.Granted && a.Mode == "ShareLock" {
			n++
		}
	}
	return n
}

// listenRaw LISTENs on the release channel on a connection of its own, as
// an observer of every NOTIFY the releases send.
func listenRaw(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(testCtx(t), shared.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if _, err := c.Exec(testCtx(t), "LISTEN "+notifyChannel); err != nil {
		t.Fatal(err)
	}
	return c
}

// nextPayloads sends a sentinel NOTIFY and returns the payloads c receives up
// to it. Notifications arrive in commit order, so the list holds exactly
// what was sent on the channel before the sentinel.
func nextPayloads(t *testing.T, c *pgx.Conn) []string {
	t.Helper()
	sentinel := fmt.Sprintf("sentinel-%d", keySeq.Add(1))
	if err := shared.Exec(testCtx(t), "SELECT pg_notify($1, $2)", notifyChannel, sentinel); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := c.WaitForNotification(testCtx(t))
		if err != nil {
			t.Fatalf("waiting for the sentinel NOTIFY: %v (got %q)", err, got)
		}
		if n.Payload == sentinel {
			return got
		}
		got = append(got, n.Payload)
	}
}

// A release sends a NOTIFY only when some Locker has a waiter: with nobody
// waiting the channel stays silent (no xid, no WAL flush for the release);
// with a waiter (of another Locker, on another pool) the release of its key
// is announced and wakes it at once.
func TestReleaseNotifiesOnlyWhenWaited(t *testing.T) {
	waitFor(t, "earlier tests' listeners to end", func() bool { return waitKeyHolders(t) == 0 })
	raw := listenRaw(t)
	a, b := newLocker(t, 2), newLocker(t, 2)
	key := uniqueKey(t)
	n, _ := pglock.HashKey(key).Int64()
	payload := fmt.Sprintf("i%d", n)

	for range 3 {
		lock := lockcheck.MustAcquire(t, a, key, 10*time.Second)
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := nextPayloads(t, raw); len(got) != 0 {
		t.Fatalf("releases with nobody waiting sent NOTIFYs %q", got)
	}

	releaseWakes(t, a, b, key)
	if got := nextPayloads(t, raw); len(got) == 0 || got[0] != payload {
		t.Fatalf("NOTIFYs after a release with a waiter: %q, want %q first", got, payload)
	}

	// The last waiter gone, the listener lets WaitKey go, and releases are
	// silent again.
	b.Close()
	waitFor(t, "the listener to end", func() bool { return waitKeyHolders(t) == 0 })
	lockcheck.MustAcquire(t, a, key, 10*time.Second).Release(testCtx(t))
	if got := nextPayloads(t, raw); len(got) != 0 {
		t.Fatalf("a release after the waiters left sent NOTIFYs %q", got)
	}
}

// No missed wake-up: whenever the holder lets go — before the waiter's
// first attempt, between its failed attempt and its listener's start, or
// while it waits — the waiter gets the lock long before its next poll. A
// release that skipped its NOTIFY while the waiter was not yet covered
// would leave it waiting the whole 10s retry delay.
func TestNoMissedWakeup(t *testing.T) {
	a, b := newLocker(t, 2), newLocker(t, 2)
	const rounds = 24 // three per release offset
	for i := range rounds {
		key := uniqueKey(t)
		lock := lockcheck.MustAcquire(t, a, key, 10*time.Second)
		got := make(chan error, 1)
		start := make(chan struct{})
		go func() {
			<-start
			lb, err := dlock.Acquire(testCtx(t), b, key, 10*time.Second,
				dlock.WithRetryDelay(10*time.Second), dlock.WithRetryJitter(time.Millisecond))
			if err == nil {
				err = lb.Release(context.Background())
			}
			got <- err
		}()
		close(start)
		// Spread the release over the waiter's first attempt and its
		// listener's start (a round trip or two each).
		time.Sleep(time.Duration(i%8) * 250 * time.Microsecond)
		if err := lock.Release(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("round %d: waiter: %v", i, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("round %d: the waiter missed the release (still waiting 3s later)", i)
		}
	}
}

// The release statement builds the NOTIFY payload in SQL; for the pair form
// it must match what the waiting Locker listens for, or the waiter would
// sit out its poll.
func TestPairReleaseWakesWaiter(t *testing.T) {
	pairs := pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		var a, b int32
		_, err := fmt.Sscanf(name, "tenant:%d:%d", &a, &b)
		return pglock.KeyPair(a, b), err
	})
	a, b := newLocker(t, 2, pairs), newLocker(t, 2, pairs)
	const key = "tenant:-7:42"
	releaseWakes(t, a, b, key)
}

// releaseWakes has a hold key while b waits for it (parked, so only a NOTIFY
// can wake it), releases, and checks that b got the lock well within its
// poll interval.
func releaseWakes(t *testing.T, a, b *pglock.Locker, key string) {
	t.Helper()
	lock := lockcheck.MustAcquire(t, a, key, 10*time.Second)
	got := waitParked(t, &counting{Locker: b}, key)
	released := time.Now()
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("the waiter acquired %v after the release; want well under its 5s poll", d)
	}
}

// Nested locks on a small pool: a Locker over two connections that holds
// one lock and waits for a second gets it as soon as its holder lets go
// (the release listener must not take the connection the attempts need),
// and once its locks pin both connections a third Acquire fails at once
// with ErrPoolExhausted, long before its deadline.
func TestNestedWaitSmallPool(t *testing.T) {
	a, b := newLocker(t, 2), newLocker(t, 2)
	keyA, keyB := uniqueKey(t), uniqueKey(t)
	lockcheck.MustAcquire(t, a, keyA, 10*time.Second)
	lb := lockcheck.MustAcquire(t, b, keyB, 10*time.Second)

	const deadline = 4 * time.Second
	got := make(chan error, 1)
	var nested *dlock.Lock
	go func() {
		ctx, cancel := context.WithTimeout(testCtx(t), deadline)
		defer cancel()
		var err error
		nested, err = dlock.Acquire(ctx, a, keyB, 10*time.Second,
			dlock.WithRetryDelay(5*time.Second), dlock.WithRetryJitter(time.Millisecond))
		got <- err
	}()
	waitFor(t, "the waiter's listener", func() bool { return waitKeyHolders(t) >= 1 })
	released := time.Now()
	if err := lb.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("nested Acquire %v after the release: %v", time.Since(released), err)
	}
	defer nested.Release(context.Background())
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("nested Acquire took %v after the release; want well under its 5s poll", d)
	}

	// Both connections pinned by a's locks: no hang, a clear error.
	ctx, cancel := context.WithTimeout(testCtx(t), deadline)
	defer cancel()
	start := time.Now()
	_, err := dlock.Acquire(ctx, a, uniqueKey(t), 10*time.Second)
	wantSentinel(t, err, dlock.ErrUnavailable)
	wantIs(t, err, pglock.ErrPoolExhausted)
	if !strings.Contains(err.Error(), "2 held locks pin all 2 connections") {
		t.Fatalf("message does not count the pinned connections: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a pool pinned by held locks took %v to refuse", d)
	}
}

// dlock.Acquire and dlock.Do wait for a Key of the caller's (ForKey) as for
// a name: woken by the release (parked with a 5s poll), and Do holds the
// lock while fn runs and releases it after.
func TestAcquireKeyDoKey(t *testing.T) {
	a, b := newLocker(t, 2), newLocker(t, 2)
	k := pglock.KeyPair(-3, int32(keySeq.Add(1)))
	la, err := a.ForKey(k).TryAcquire(testCtx(t), k.String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lb, err := dlock.Acquire(testCtx(t), b.ForKey(k), k.String(), 10*time.Second,
			dlock.WithRetryDelay(5*time.Second), dlock.WithRetryJitter(time.Millisecond))
		if err == nil {
			if lb.Key() != k.String() {
				err = fmt.Errorf("Key() = %q, want %q", lb.Key(), k.String())
			}
			lb.Release(context.Background())
		}
		got <- err
	}()
	waitFor(t, "the waiter's listener", func() bool { return waitKeyHolders(t) >= 1 })
	released := time.Now()
	if err := la.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("AcquireKey: %v", err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("AcquireKey took %v after the release; want well under its 5s poll", d)
	}

	err = dlock.Do(testCtx(t), a.ForKey(k), k.String(), 10*time.Second, func(ctx context.Context) error {
		if dlock.LockFromContext(ctx).Fence() == 0 {
			return fmt.Errorf("no fence in fn's context")
		}
		if _, err := b.ForKey(k).TryAcquire(ctx, k.String(), time.Second); !errors.Is(err, dlock.ErrNotAcquired) {
			return fmt.Errorf("TryAcquire on ForKey during Do: %v, want ErrNotAcquired", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("DoKey: %v", err)
	}
	mustRelease(t, b, k) // DoKey released
	wantIs(t, dlock.Do(testCtx(t), a.ForKey(pglock.Key{}), pglock.Key{}.String(), time.Second, func(context.Context) error { return nil }), dlock.ErrInvalid)
	_, err = dlock.Acquire(testCtx(t), a.ForKey(pglock.Key{}), pglock.Key{}.String(), time.Second)
	wantIs(t, err, dlock.ErrInvalid)
}

func mustRelease(t *testing.T, l *pglock.Locker, k pglock.Key) {
	t.Helper()
	lock, err := l.ForKey(k).TryAcquire(testCtx(t), k.String(), time.Second)
	if err != nil {
		t.Fatalf("TryAcquire on ForKey after the holder let go: %v", err)
	}
	if err := lock.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// records collects the warnings a Locker logs.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r <- rec:
	default:
	}
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// A release listener whose session is killed says so through WithLogger
// (waiters poll until it is back), and reconnects.
func TestListenerLossWarns(t *testing.T) {
	if _, err := pglock.New(shared.Pool(t, 1), pglock.WithLogger(nil)); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("WithLogger(nil): %v", err)
	}
	warnings := make(records, 8)
	a, b := newLocker(t, 2), newLocker(t, 2, pglock.WithLogger(slog.New(warnings)))
	key := uniqueKey(t)
	la := lockcheck.MustAcquire(t, a, key, 10*time.Second)
	got := waitParked(t, &counting{Locker: b}, key)
	var pid uint32
	locks, err := shared.AdvisoryLocks(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range locks {
		if l.ObjSubID == 1 && l.Int64() == pglock.WaitKey && l.Mode == "ShareLock" {
			pid = l.PID
		}
	}
	if err := shared.Terminate(testCtx(t), pid); err != nil {
		t.Fatal(err)
	}
	select {
	case rec := <-warnings:
		if rec.Level != slog.LevelWarn || !strings.Contains(rec.Message, "release listener") {
			t.Fatalf("logged %v %q, want a warning about the release listener", rec.Level, rec.Message)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no warning 5s after the listener's session was killed")
	}
	waitFor(t, "the listener to reconnect", func() bool { return waitKeyHolders(t) >= 1 })
	if err := la.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// NotifyRelease registers nothing with notifications off or for a key
// TryAcquire rejects, and then does not call the key function either: a
// user's function sees only names a lock attempt would map.
func TestNotifyReleaseChecksBeforeKeyFunc(t *testing.T) {
	var calls atomic.Int32
	keyFunc := pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		calls.Add(1)
		return pglock.HashKey(name), nil
	})
	for _, c := range []struct {
		what string
		key  string
		opts []pglock.Option
	}{
		{"notifications off", "k", []pglock.Option{keyFunc, pglock.WithReleaseNotify(false)}},
		{"empty key", "", []pglock.Option{keyFunc}},
	} {
		calls.Store(0)
		l := newLocker(t, 2, c.opts...)
		ch, stop := l.NotifyRelease(testCtx(t), c.key)
		stop()
		if ch != nil || calls.Load() != 0 {
			t.Errorf("%s: NotifyRelease gave a channel (%v) or called the key function %d times; want neither",
				c.what, ch != nil, calls.Load())
		}
	}
}

// A TryAcquire whose ttl is refused never reaches the user's key function,
// which may be costly or have effects of its own.
func TestTryAcquireChecksTTLBeforeKeyFunc(t *testing.T) {
	var calls atomic.Int32
	l := newLocker(t, 2, pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		calls.Add(1)
		return pglock.HashKey(name), nil
	}))
	_, err := l.TryAcquire(testCtx(t), "k", 0)
	if !errors.Is(err, dlock.ErrInvalid) || calls.Load() != 0 {
		t.Errorf("TryAcquire with ttl 0: err %v, key function called %d times; want ErrInvalid and none", err, calls.Load())
	}
}

// TryAcquire refuses the first bad argument in the order every backend
// checks them: ForKey's zero Key, ctx, key, then ttl; the key function
// comes after all of them.
func TestTryAcquireCheckOrder(t *testing.T) {
	var calls atomic.Int32
	l := newLocker(t, 2, pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		calls.Add(1)
		return pglock.HashKey(name), nil
	}))
	var nilCtx context.Context // the bad input under test
	k := pglock.KeyPair(-5, 1)
	for _, c := range []struct {
		what   string
		locker dlock.Locker
		ctx    context.Context
		key    string
		want   string
	}{
		{"nil ctx", l, nilCtx, "k", "nil context"},
		{"empty key", l, testCtx(t), "", "empty lock key"},
		{"ForKey nil ctx", l.ForKey(k), nilCtx, "k", "nil context"},
		{"ForKey empty key", l.ForKey(k), testCtx(t), "", "empty lock key"},
		{"ForKey zero Key, nil ctx", l.ForKey(pglock.Key{}), nilCtx, "", "zero Key"},
	} {
		_, err := c.locker.TryAcquire(c.ctx, c.key, 0)
		if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s and ttl 0: err %v; want ErrInvalid saying %q", c.what, err, c.want)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("refused attempts called the key function %d times", calls.Load())
	}
}
