package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// scripted is a Locker whose ReadTerm answers from a script, then repeats
// its last answer; it takes no lock.
type scripted struct {
	mu      sync.Mutex
	answers []answer
}

type answer struct {
	t   dlock.Term
	err error
}

func (s *scripted) TryAcquire(context.Context, string, time.Duration) (*dlock.Lock, error) {
	return nil, dlock.ErrNotAcquired
}

func (s *scripted) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	return a.t, a.err
}

func led(id string, fence uint64) dlock.Term { return dlock.Term{Led: true, Leader: id, Fence: fence} }

// E3: Observe reports nobody, never goes back to a lower term after a
// higher one (a stale read, a lagging replica), yields errors and goes on,
// and reports the state again after an error.
func TestObserveNeverGoesBack(t *testing.T) {
	down := fmt.Errorf("%w: connection refused", dlock.ErrUnavailable)
	s := &scripted{answers: []answer{
		{t: dlock.Term{}}, {t: led("a", 5)}, {t: led("a", 5)}, {t: led("a", 3)}, {t: dlock.Term{}},
		{t: led("old", 4)}, {t: led("b", 7)}, {err: down}, {t: led("b", 7)}, {t: led("c", 6)},
		{t: led("b", 7)}, {t: dlock.Term{}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for term, err := range dlock.Observe(ctx, s, "job", dlock.WithRetryDelay(time.Millisecond), dlock.WithRetryJitter(0)) {
		switch {
		case err != nil:
			got = append(got, "error")
		case term.Name != "job":
			t.Fatalf("term %+v does not name the election", term)
		case !term.Led:
			got = append(got, "nobody")
		default:
			got = append(got, fmt.Sprintf("%s:%d", term.Leader, term.Fence))
		}
		if len(got) == 7 {
			break
		}
	}
	want := "nobody a:5 nobody b:7 error b:7 nobody"
	if strings.Join(got, " ") != want {
		t.Fatalf("observed %q, want %q", strings.Join(got, " "), want)
	}
}

// An error that reading again cannot change ends the observation.
func TestObserveEndsOnInvalid(t *testing.T) {
	s := &scripted{answers: []answer{{t: dlock.Term{}}, {err: fmt.Errorf("%w: bad", dlock.ErrInvalid)}}}
	n := 0
	for _, err := range dlock.Observe(context.Background(), s, "job", dlock.WithRetryDelay(time.Millisecond)) {
		n++
		if n == 2 {
			lockcheck.WantError(t, err, dlock.ErrInvalid)
		}
	}
	if n != 2 {
		t.Fatalf("%d yields, want 2", n)
	}
}

// identities is a Locker that records the identity of each attempt.
type identities struct {
	*memLocker
	mu  sync.Mutex
	ids []string
}

func (l *identities) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	l.mu.Lock()
	l.ids = append(l.ids, driver.Identity(ctx))
	l.mu.Unlock()
	return l.memLocker.TryAcquire(ctx, key, ttl)
}

// The identity reaches each attempt of Acquire, Do and Lead (host:pid by
// default for Lead), and no bare TryAcquire; two candidates of one Locker
// have their own.
func TestIdentityReachesAttempts(t *testing.T) {
	l := &identities{memLocker: newMem()}
	ctx := context.Background()
	lock, err := l.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lock.Release(ctx)
	if lock, err = dlock.Acquire(ctx, l, "k", time.Second, dlock.WithIdentity("acq")); err != nil {
		t.Fatal(err)
	}
	lock.Release(ctx)
	nop := func(context.Context) error { return nil }
	if err := dlock.Do(ctx, l, "k", time.Second, nop); err != nil {
		t.Fatal(err)
	}
	if err := dlock.Lead(ctx, l, "k", time.Second, nop); err != nil {
		t.Fatal(err)
	}
	if err := dlock.Lead(ctx, l, "k", time.Second, nop, dlock.WithIdentity("b")); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := []string{"", "acq", "", fmt.Sprintf("%s:%d", host, os.Getpid()), "b"}
	if fmt.Sprint(l.ids) != fmt.Sprint(want) {
		t.Fatalf("identities %q, want %q", l.ids, want)
	}
}

// IsLeader answers nil only within the validity: a clock past it ends the
// leadership at once, before any goroutine of dlock's has run.
func TestIsLeaderWithinValidity(t *testing.T) {
	clock := &fakeClock{}
	m := newMem()
	m.now = clock.now
	c, err := dlock.Campaign(context.Background(), m, "k", 10*time.Second, dlock.WithRecampaign(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Resign(context.Background())
	lockcheck.Eventually(t, 5*time.Second, func() error { return c.IsLeader(context.Background()) })
	clock.advance(10 * time.Second)
	lockcheck.WantError(t, c.IsLeader(context.Background()), dlock.ErrNotAcquired)
	if _, ok := c.Term(); ok {
		t.Fatal("Term reports a leadership whose validity ran out")
	}
}

// A hanging extension does not keep a Candidate a leader past its
// validity, and Resign then still returns.
func TestIsLeaderWhileExtensionHangs(t *testing.T) {
	m := newMem()
	m.extend = func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() }
	ttl := 300 * time.Millisecond
	c, err := dlock.Campaign(context.Background(), m, "k", ttl, dlock.WithRecampaign(false))
	if err != nil {
		t.Fatal(err)
	}
	lockcheck.Eventually(t, 5*time.Second, func() error { return c.IsLeader(context.Background()) })
	led := time.Now()
	lockcheck.Eventually(t, 5*time.Second, func() error {
		if c.IsLeader(context.Background()) == nil {
			return errors.New("still the leader")
		}
		return nil
	})
	if d := time.Since(led); d > ttl+100*time.Millisecond {
		t.Fatalf("IsLeader said nil for %v with a ttl of %v", d, ttl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lockcheck.WantError(t, c.Resign(ctx), dlock.ErrLockLost)
}

// Lead's function may call back into the election: Leader, a Candidate's
// IsLeader and Resign of another campaign, from within the term.
func TestLeadCallbacks(t *testing.T) {
	m := newMem()
	ctx := context.Background()
	other, err := dlock.Campaign(ctx, m, "other", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	err = dlock.Lead(ctx, m, "k", time.Second, func(ctx context.Context) error {
		if term, err := dlock.Leader(ctx, m, "k"); err != nil || !term.Led {
			return fmt.Errorf("Leader from within the term: %v, %v", term, err)
		}
		lockcheck.Eventually(t, 5*time.Second, func() error { return other.IsLeader(ctx) })
		return other.Resign(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTermString(t *testing.T) {
	for _, tc := range []struct {
		t    dlock.Term
		want string
	}{
		{dlock.Term{Name: "job"}, `nobody leads "job"`},
		{dlock.Term{Name: "job", Led: true}, `someone leads "job"`},
		{dlock.Term{Name: "job", Led: true, Leader: "a:1", Fence: 7}, `a:1 leads "job" in term 7`},
		{dlock.Term{Name: "job", Led: true, Fence: 7}, `an unnamed holder leads "job" in term 7`},
	} {
		if got := tc.t.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.t, got, tc.want)
		}
	}
}
