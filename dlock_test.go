package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestMain starts the redis-server the examples find at $REDIS_ADDR.
func TestMain(m *testing.M) {
	if testsrv.FuzzWorker() {
		os.Exit(m.Run()) // the fuzz targets need no server
	}
	dir, err := os.MkdirTemp("", "dlock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := testsrv.NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", srv.Addr)
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// memLocker is an in-process Locker for testing the root package's own
// logic (waiting, Do's keep-alive, handle state) with faults that a real
// server cannot produce on cue. Its "server" keeps each key's token and
// expiry, so tests can compare a handle's belief with what the server has.
// Unlike package dlocktest's Locker (for users' tests: busy, lost, outage,
// time), it reaches into each call of a grant: one that hangs, a reply
// applied but lost or late, and counts of what reached the server. The
// backends' behaviour is tested against real servers in their own
// packages.
type memLocker struct {
	mu       sync.Mutex
	keys     map[string]memKey
	fence    uint64
	attempts atomic.Int64
	extends  atomic.Int64 // extensions that reached the server
	releases atomic.Int64 // releases that reached the server

	// now is the clock of the server and of the handles it grants, through
	// memGrant's Now (time.Now when nil).
	now func() time.Time

	// Fault hooks, each optional and set before the locker is used. An
	// error from acquire, extend or release replaces the outcome of the
	// attempt, extension or release before it reaches the server;
	// extended runs after the server applied an extension, and its error
	// replaces the reply (the reply was lost or late).
	acquire  func(ctx context.Context) error
	extend   func(ctx context.Context, ttl time.Duration) error
	extended func(ctx context.Context, ttl time.Duration) error
	release  func(ctx context.Context) error
	// granted runs on each lock granted, before TryAcquire returns it.
	granted func(lock *dlock.Lock)

	events driver.Events // the observers of newObserved; none by default
}

type memKey struct {
	token   string
	expires time.Time
}

func newMem() *memLocker { return &memLocker{keys: map[string]memKey{}} }

// newObserved returns a memLocker whose events go to observers, as a
// backend's WithObserver options would send them.
func newObserved(observers ...func(context.Context, dlock.Event)) *memLocker {
	m := newMem()
	m.events = driver.NewEvents("", nil, observers...)
	return m
}

func (m *memLocker) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

func (m *memLocker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	return m.events.Attempt(ctx, key, func() (*dlock.Lock, error) {
		lock, err := m.try(ctx, key, ttl)
		if err == nil && m.granted != nil {
			m.granted(lock)
		}
		return lock, err
	})
}

func (m *memLocker) try(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	m.attempts.Add(1)
	if err := driver.Check(ctx, key, ttl); err != nil {
		return nil, err
	}
	if m.acquire != nil {
		if err := m.acquire(ctx); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.clock()
	if k, held := m.keys[key]; held && k.expires.After(start) {
		return nil, fmt.Errorf("%w (held by another owner)", dlock.ErrNotAcquired)
	}
	token := bridge.NewToken()
	m.keys[key] = memKey{token: token, expires: start.Add(ttl)}
	m.fence++
	return driver.NewLock(key, token, m.fence, start.Add(ttl), &memGrant{m: m, key: key, token: token}), nil
}

// free deletes key behind its holder's back.
func (m *memLocker) free(key string) {
	m.mu.Lock()
	delete(m.keys, key)
	m.mu.Unlock()
}

// expires returns when the server's key expires (zero if it is gone).
func (m *memLocker) expires(key string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys[key].expires
}

type memGrant struct {
	m          *memLocker
	key, token string
}

// Now is the clock the handle measures its validity on (driver.Grant).
func (g *memGrant) Now() time.Time { return g.m.clock() }

func (g *memGrant) holds() bool {
	k, ok := g.m.keys[g.key]
	return ok && k.token == g.token && k.expires.After(g.m.clock())
}

func (g *memGrant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	start := g.m.clock()
	if g.m.extend != nil {
		if err := g.m.extend(ctx, ttl); err != nil {
			return time.Time{}, err
		}
	}
	g.m.mu.Lock()
	g.m.extends.Add(1)
	if !g.holds() {
		g.m.mu.Unlock()
		return time.Time{}, fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	g.m.keys[g.key] = memKey{token: g.token, expires: g.m.clock().Add(ttl)}
	g.m.mu.Unlock()
	if g.m.extended != nil {
		if err := g.m.extended(ctx, ttl); err != nil {
			return time.Time{}, err
		}
	}
	return start.Add(ttl), nil
}

func (g *memGrant) Release(ctx context.Context) error {
	if g.m.release != nil {
		if err := g.m.release(ctx); err != nil {
			return err
		}
	}
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	g.m.releases.Add(1)
	if !g.holds() {
		return fmt.Errorf("%w (the key expired or another owner holds it)", dlock.ErrNotHeld)
	}
	delete(g.m.keys, g.key)
	return nil
}

// unavailable is the error of a backend that could not be reached, with
// the node that failed, as the backends report it.
func unavailable(node string) error {
	return fmt.Errorf("%w: %w", dlock.ErrUnavailable, &dlock.NodeError{Node: node, Err: errors.New("connection refused")})
}

// F14: an extension that hangs must not delay the loss signal past the
// validity deadline.
func TestDoLossWhileExtensionHangs(t *testing.T) {
	m := newMem()
	m.extend = func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() }
	ttl := 200 * time.Millisecond
	start := time.Now()
	var lostAt time.Duration
	err := dlock.Do(context.Background(), m, "k", ttl, func(ctx context.Context) error {
		<-ctx.Done()
		lostAt = time.Since(start)
		if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", context.Cause(ctx))
		}
		return ctx.Err()
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
	if lostAt < ttl-20*time.Millisecond || lostAt > ttl+300*time.Millisecond {
		t.Fatalf("loss signalled at %v, want at the validity deadline %v", lostAt, ttl)
	}
}

// A passing network error is retried within the validity: no loss.
func TestDoRidesOutTransientErrors(t *testing.T) {
	m := newMem()
	var calls atomic.Int64
	m.extend = func(context.Context, time.Duration) error {
		if calls.Add(1) <= 2 {
			return dlock.ErrUnavailable
		}
		return nil
	}
	err := dlock.Do(context.Background(), m, "k", 600*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Second):
			return nil
		}
	})
	if err != nil {
		t.Fatalf("Do: %v (extensions tried %d times)", err, calls.Load())
	}
	if calls.Load() < 3 {
		t.Fatalf("extension tried %d times, want retries after the failures", calls.Load())
	}
}

// A refused extension ends the lock at once, not at the deadline.
func TestDoRefusedExtension(t *testing.T) {
	m := newMem()
	ttl := 400 * time.Millisecond
	start := time.Now()
	err := dlock.Do(context.Background(), m, "k", ttl, func(ctx context.Context) error {
		m.free("k") // taken away behind the holder's back
		<-ctx.Done()
		if d := time.Since(start); d > ttl {
			t.Errorf("refusal noticed after %v; the first extension is due at %v", d, ttl/2)
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
}

// A successful reply that arrives after the handle was declared lost must
// not make it held again.
func TestLateExtensionDoesNotRevive(t *testing.T) {
	m := newMem()
	release := make(chan struct{})
	m.extended = func(context.Context, time.Duration) error { <-release; return nil } // applied, reply late
	lock, err := m.TryAcquire(context.Background(), "k", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- lock.Extend(context.Background(), time.Minute) }()
	time.Sleep(150 * time.Millisecond) // validity runs out while the reply is late
	close(release)
	if err := <-done; !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("late extension: %v, want ErrLockLost", err)
	}
	if lock.Held() {
		t.Fatal("handle held again after a late extension reply")
	}
	if err := lock.Extend(context.Background(), time.Minute); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("extension of a lost handle: %v, want ErrLockLost", err)
	}
}

func TestAcquireRetryBudget(t *testing.T) {
	m := newMem()
	if _, err := m.TryAcquire(context.Background(), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	m.attempts.Store(0)
	_, err := dlock.Acquire(context.Background(), m, "k", time.Minute,
		dlock.WithRetryCount(3), dlock.WithRetryDelay(time.Millisecond), dlock.WithRetryJitter(0))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("got %v, want ErrNotAcquired", err)
	}
	if n := m.attempts.Load(); n != 4 {
		t.Fatalf("%d attempts with a retry count of 3, want 4", n)
	}
}

// A waiting Acquire retries as soon as the Locker announces a release
// (driver.ReleaseNotifier), not at its next poll.
func TestAcquireWakesOnRelease(t *testing.T) {
	l := dlocktest.New()
	other, err := l.Hold("k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { other.Release(context.Background()) })
	start := time.Now()
	lock, err := dlock.Acquire(context.Background(), l, "k", time.Minute, dlock.WithRetryDelay(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("waiter took %v with a 10s poll interval; the release notification was ignored", d)
	}
}

func TestOptionValidation(t *testing.T) {
	m := newMem()
	fn := func(context.Context) error { return nil }
	for name, opt := range map[string]dlock.Option{
		"retry count -2":     dlock.WithRetryCount(-2),
		"negative delay":     dlock.WithRetryDelay(-time.Second),
		"negative jitter":    dlock.WithRetryJitter(-time.Second),
		"zero threshold":     dlock.WithExtendThreshold(0),
		"threshold over ttl": dlock.WithExtendThreshold(2 * time.Second),
		"zero max hold":      dlock.WithMaxHold(0),
		"nil option":         nil,
	} {
		if err := dlock.Do(context.Background(), m, "k", time.Second, fn, opt); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if err := dlock.Do(context.Background(), nil, "k", time.Second, fn); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil locker: got %v", err)
	}
}

func TestCheckTTLAndMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		ttl    time.Duration
		ok     bool
		millis int64
	}{
		{time.Millisecond, true, 1},
		{1500 * time.Microsecond, true, 2}, // rounded up, never down
		{time.Second, true, 1000},
		{0, false, 0},
		{-time.Second, false, 0},
		{time.Microsecond, false, 0},
		{bridge.MaxTTL + 1, false, 0},
	} {
		err := bridge.CheckTTL(tc.ttl)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTTL(%v) = %v, want ok=%v", tc.ttl, err, tc.ok)
		}
		if tc.ok && bridge.Milliseconds(tc.ttl) != tc.millis {
			t.Errorf("Milliseconds(%v) = %d, want %d", tc.ttl, bridge.Milliseconds(tc.ttl), tc.millis)
		}
	}
}

func TestSetDriftFactor(t *testing.T) {
	for f, ok := range map[float64]bool{0: true, 0.01: true, 0.999: true, 1: false, -0.1: false, math.NaN(): false, math.Inf(1): false} {
		var cfg backend.Config
		err := cfg.SetDriftFactor(f)
		if (err == nil) != ok || (err != nil && !errors.Is(err, dlock.ErrInvalid)) {
			t.Errorf("SetDriftFactor(%v) = %v, want ok=%v", f, err, ok)
		}
	}
}

func TestTokensAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		tok := bridge.NewToken()
		if len(tok) < 22 || seen[tok] {
			t.Fatalf("token %q repeated or shorter than 128 bits", tok)
		}
		seen[tok] = true
	}
}
