package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// fakeClock runs with the real clock, plus the jumps a test makes.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// The function's context reports the loss as soon as the validity has run
// out, through each of Err, Cause and Done, before Do's goroutine had any
// chance to run: the clock jumps (as it does for a process resumed after a
// pause) and the function looks at once.
func TestDoContextTruthfulAtOnce(t *testing.T) {
	for name, look := range map[string]func(ctx context.Context) error{
		"Err":   func(ctx context.Context) error { return ctx.Err() },
		"Cause": func(ctx context.Context) error { return context.Cause(ctx) },
		"Done": func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			default:
				return nil
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{}
			m := newMem()
			m.now = clock.now
			err := dlock.Do(context.Background(), m, "k", 10*time.Second, func(ctx context.Context) error {
				clock.advance(11 * time.Second)
				got := look(ctx)
				if got == nil {
					t.Errorf("%s reports nothing 1s after the validity ran out", name)
				}
				if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrLockLost) {
					t.Errorf("cause %v, want ErrLockLost", cause)
				}
				return nil
			})
			if !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Do: %v, want ErrLockLost", err)
			}
		})
	}
}

// firstExtension makes m close the returned channel a little after the
// first extension (Do's own) was applied: by then Do's keep-alive has
// recorded its outcome (nothing signals that; 50ms is ample), so what the
// function does next is a change it must follow.
func firstExtension(m *memLocker) <-chan struct{} {
	first := make(chan struct{})
	var once sync.Once
	m.extended = func(context.Context, time.Duration) error {
		once.Do(func() { time.AfterFunc(50*time.Millisecond, func() { close(first) }) })
		return nil
	}
	return first
}

// When the function shortens the lease, Do's deadline follows: with the
// keep-alive's extensions hanging, the function's context ends when the
// shortened validity does, not when the original one would have.
func TestDoFollowsShortenedLease(t *testing.T) {
	m := newMem()
	var n atomic.Int64
	m.extend = func(ctx context.Context, _ time.Duration) error {
		if n.Add(1) == 1 {
			return nil // the function's own extension
		}
		<-ctx.Done() // the keep-alive's: no answer
		return fmt.Errorf("%w: %w", dlock.ErrUnavailable, ctx.Err())
	}
	const short = 300 * time.Millisecond
	var endedAfter time.Duration
	err := dlock.Do(context.Background(), m, "k", 10*time.Second, func(ctx context.Context) error {
		// Let the keep-alive start and read the first validity (nothing
		// signals that; 50ms is ample), so the extension below changes
		// what it must follow.
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if err := dlock.LockFromContext(ctx).Extend(ctx, short); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			endedAfter = time.Since(start)
		case <-time.After(3 * time.Second):
			return errors.New("context alive 3s after a 300ms extension whose renewals hang")
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
	if endedAfter < short-50*time.Millisecond {
		t.Fatalf("context ended %v after a %v extension: before its validity ran out", endedAfter, short)
	}
}

// When the function lengthens the lease, Do's next extension follows too:
// it comes when the threshold of the new validity is left, not earlier.
func TestDoFollowsLengthenedLease(t *testing.T) {
	m := newMem()
	first := firstExtension(m)
	err := dlock.Do(context.Background(), m, "k", 300*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-first:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := dlock.LockFromContext(ctx).Extend(ctx, 10*time.Second); err != nil {
			return err
		}
		before := m.extends.Load()
		time.Sleep(600 * time.Millisecond) // two of the original TTLs
		if n := m.extends.Load() - before; n != 0 {
			return fmt.Errorf("%d extensions in 600ms of a 10s validity with a 150ms threshold", n)
		}
		return context.Cause(ctx)
	}, dlock.WithExtendThreshold(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
}

// A function that releases the lock itself, with its own context, can:
// the context stays alive while the Release runs (a backend would abandon
// a request on a cancelled context), and ends once it is done (the lock is
// no longer held). Do does not report the release it then skips.
func TestDoFunctionReleases(t *testing.T) {
	m := newMem()
	m.release = func(ctx context.Context) error { return ctx.Err() }
	err := dlock.Do(context.Background(), m, "k", 10*time.Second, func(ctx context.Context) error {
		if err := dlock.LockFromContext(ctx).Release(ctx); err != nil {
			return err
		}
		if !errors.Is(context.Cause(ctx), dlock.ErrNotHeld) {
			return fmt.Errorf("after the function's own Release: cause %v, want ErrNotHeld", context.Cause(ctx))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if m.releases.Load() != 1 {
		t.Fatalf("%d releases reached the server, want 1", m.releases.Load())
	}
}

// Do returns the function's own error as it is when nothing else went
// wrong, and keeps it first, on one line, when the lock was lost too.
func TestDoKeepsFunctionError(t *testing.T) {
	boom := errors.New("boom")
	if err := dlock.Do(context.Background(), newMem(), "k", time.Minute, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Do: %v, want the function's error itself", err)
	}
	m := newMem()
	err := dlock.Do(context.Background(), m, "k", 200*time.Millisecond, func(ctx context.Context) error {
		m.free("k")
		<-ctx.Done()
		return boom
	})
	lockcheck.WantError(t, err, dlock.ErrLockLost, boom)
	if got := err.Error(); len(got) < 6 || got[:6] != "boom; " {
		t.Fatalf("Do: %q, want the function's error first", got)
	}
}

const sigstopEnv = "DLOCK_TEST_SIGSTOP_HOLDER"

// A holder stopped with SIGSTOP past its validity and resumed: the first
// look at its context after the resume reports the loss. The holder runs
// in a child process (this test binary), so SIGSTOP freezes all of it.
func TestDoHolderStoppedPastValidity(t *testing.T) {
	if os.Getenv(sigstopEnv) != "" {
		sigstopHolder()
		return
	}
	const rounds = 3
	for i, tries := 0, 0; i < rounds; tries++ {
		res := stopHolderOnce(t)
		switch {
		case res == "lost":
			i++
		case strings.HasPrefix(res, "context ended before the pause") && tries < 3*rounds:
			// The stop came late on a loaded machine: not a pause past
			// the validity. Try again.
			t.Logf("round %d: %s; again", i+1, res)
		default:
			t.Fatalf("round %d of %d: %s", i+1, rounds, res)
		}
	}
}

// holderTTL is the child's lease; the parent stops it for stopFor.
const holderTTL, stopFor = 800 * time.Millisecond, 1500 * time.Millisecond

func stopHolderOnce(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoHolderStoppedPastValidity$", "-test.count=1")
	cmd.Env = append(os.Environ(), sigstopEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	next := func() string {
		for lines.Scan() {
			if l, ok := strings.CutPrefix(lines.Text(), "holder: "); ok {
				return l
			}
		}
		t.Fatalf("holder exited early: %v", lines.Err())
		return ""
	}
	if l := next(); l != "ready" {
		t.Fatalf("holder: %s", l)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stopFor) // the pause is the point: past the holder's validity
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return next()
}

// sigstopHolder is the child: inside Do it spins looking at its context
// until it sees the loss, and reports whether the context ever said the
// lock was alive at a moment its validity had already run out.
func sigstopHolder() {
	m := newMem()
	_ = dlock.Do(context.Background(), m, "k", holderTTL, func(ctx context.Context) error {
		until := dlock.LockFromContext(ctx).ValidUntil()
		last := time.Now() // before "ready": the stop comes after it
		fmt.Println("holder: ready")
		for {
			before := time.Now()
			if ctx.Err() != nil {
				if time.Since(last) < holderTTL {
					fmt.Printf("holder: context ended before the pause: %v\n", context.Cause(ctx))
				} else if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
					fmt.Printf("holder: cause %v\n", context.Cause(ctx))
				} else {
					fmt.Println("holder: lost")
				}
				return nil
			}
			if !before.Before(until) {
				fmt.Printf("holder: context alive %v after the validity ran out, after a pause\n", before.Sub(until))
				return nil
			}
			last = before
		}
	}, dlock.WithMaxHold(holderTTL)) // no extension: the validity ends with the first TTL
}

// doReleaseUnknown runs Do with a function that releases the lock itself
// through release (whose outcome stays unknown) and then waits for its
// context; it returns the context's cause (nil if it outlived the
// validity by far) and Do's error.
func doReleaseUnknown(t *testing.T, m *memLocker, ttl time.Duration, release func(l *dlock.Lock)) (cause, err error) {
	t.Helper()
	err = dlock.Do(context.Background(), m, "k", ttl, func(ctx context.Context) error {
		release(dlock.LockFromContext(ctx))
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(ttl + 2*time.Second): // generous: 2 cores shared
		}
		return nil
	})
	return cause, err
}

// A release by the function whose outcome is unknown (its context was
// already done) leaves the handle releasing: the function's context must
// still end at the validity deadline, as a loss, and so must Do's error.
func TestDoOwnReleaseUnknownEndsAtValidity(t *testing.T) {
	m := newMem()
	ttl := 300 * time.Millisecond
	cause, err := doReleaseUnknown(t, m, ttl, func(l *dlock.Lock) {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		m.release = func(ctx context.Context) error { return ctx.Err() }
		if err := l.Release(done); !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("Release: %v, want ErrUnavailable", err)
		}
		m.release = nil
	})
	if !errors.Is(cause, dlock.ErrLockLost) {
		t.Errorf("fn's context cause %v after the validity, want ErrLockLost", cause)
	}
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
}

// A release by the function that hangs past the validity: the context
// ends at the validity deadline, not when the release returns.
func TestDoOwnReleaseHangsEndsAtValidity(t *testing.T) {
	m := newMem()
	ttl := 300 * time.Millisecond
	unblock := make(chan struct{})
	m.release = func(ctx context.Context) error {
		select {
		case <-unblock:
			return errors.New("connection reset")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	cause, err := doReleaseUnknown(t, m, ttl, func(l *dlock.Lock) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Release(context.Background())
		}()
		lockcheck.Eventually(t, time.Second, func() error {
			if l.Held() {
				return errors.New("release not started")
			}
			return nil
		})
	})
	close(unblock)
	wg.Wait()
	if !errors.Is(cause, dlock.ErrLockLost) {
		t.Errorf("fn's context cause %v after the validity, want ErrLockLost", cause)
	}
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
}

// A loss after the caller's context was cancelled (Do keeps extending so
// that fn can finish) is still reported as a loss.
func TestDoLossAfterCallerCancelled(t *testing.T) {
	m := newMem()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := dlock.Do(ctx, m, "k", 300*time.Millisecond, func(ctx context.Context) error {
		cancel()
		m.free("k") // the next extension is refused
		lockcheck.Eventually(t, 2*time.Second, func() error {
			if dlock.LockFromContext(ctx).Held() {
				return errors.New("still held")
			}
			return nil
		})
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
}

// A panic in fn goes on past Do, with its value, once the lock is released.
func TestDoReleasesOnPanic(t *testing.T) {
	m := newMem()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic's value", r)
			}
		}()
		_ = dlock.Do(context.Background(), m, "k", time.Minute, func(context.Context) error { panic("boom") })
		t.Fatal("Do returned after its function panicked")
	}()
	lock, err := m.TryAcquire(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatalf("after the panic the lock is still held: %v", err)
	}
	_ = lock.Release(context.Background())
}
