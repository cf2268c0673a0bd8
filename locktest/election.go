package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// RunElection runs the conformance suite of leader election (dlock.Lead,
// Leader, Observe, Campaign) as subtests of t, on the Lockers newLocker
// makes. It holds any backend to what the root package promises: one
// leader at a time, terms that strictly increase, "nobody" reported after
// a resignation and after an expiry, a loss that ends the term and a new
// campaign, and a resignation that wakes the next candidate at once when
// the backend announces releases (driver.ReleaseNotifier). A backend with
// a driver.TermReader must also report the leader's identity and term
// exactly; one without is held to what the root's probe can tell (that
// someone leads). WithLapse is needed for the tests of a lost leadership,
// which are skipped without it.
func RunElection(t *testing.T, newLocker func(t *testing.T) dlock.Locker, opts ...Option) {
	s := newSuite(newLocker, opts)
	t.Run("OneLeaderAtATime", s.oneLeaderAtATime)
	t.Run("NobodyLeads", s.nobodyLeads)
	t.Run("LeaderNamesLeader", s.leaderNamesLeader)
	t.Run("ResignWakesNext", s.resignWakesNext)
	t.Run("LossCampaignsAgain", s.lossCampaignsAgain)
	t.Run("ObserveSequence", s.observeSequence)
	t.Run("Candidate", s.candidate)
	t.Run("CandidateLoses", s.candidateLoses)
	t.Run("CancelledCampaign", s.cancelledCampaign)
	t.Run("ElectionBadInput", s.electionBadInput)
}

// readsTerms reports whether l can say who holds a lock, and so must name
// the leader and its term exactly.
func readsTerms(l dlock.Locker) bool {
	_, ok := l.(driver.TermReader)
	return ok
}

// wantLeader fails t unless Leader, asked through l, reports the term want
// (exactly when l reads terms, as "someone leads" otherwise), or nobody
// when want.Led is false.
func wantLeader(t *testing.T, l dlock.Locker, want dlock.Term) {
	t.Helper()
	got, err := dlock.Leader(lockcheck.Ctx(t), l, want.Name)
	if err != nil {
		t.Fatalf("Leader(%q): %v", want.Name, err)
	}
	if got.Name != want.Name || got.Led != want.Led {
		t.Fatalf("Leader: got %v, want %v", got, want)
	}
	if want.Led && readsTerms(l) && (got.Leader != want.Leader || got.Fence != want.Fence) {
		t.Fatalf("Leader: got %q in term %d, want %q in term %d", got.Leader, got.Fence, want.Leader, want.Fence)
	}
	if !want.Led && (got.Leader != "" || got.Fence != 0 || !got.Since.IsZero()) {
		t.Fatalf("Leader: nobody leads, yet the term says %+v", got)
	}
}

// Three candidates, each on its own Locker, lead three times each: their
// functions never run at once, and each term is above the one before.
func (s *suite) oneLeaderAtATime(t *testing.T) {
	name := lockcheck.Key(t)
	var inside atomic.Int32
	var mu sync.Mutex
	var terms []uint64
	var wg sync.WaitGroup
	for i := range 3 {
		l := s.newLocker(t)
		id := fmt.Sprintf("candidate-%d", i)
		wg.Go(func() {
			for range 3 {
				err := dlock.Lead(lockcheck.Ctx(t), l, name, 10*time.Second, func(ctx context.Context) error {
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d leaders at once", n)
					}
					defer inside.Add(-1)
					term, ok := dlock.TermFromContext(ctx)
					lock := dlock.LockFromContext(ctx)
					switch {
					case !ok || lock == nil:
						t.Errorf("fn's context carries no term (%v) or no lock", ok)
					case term.Name != name || !term.Led || term.Leader != id || term.Fence != lock.Fence():
						t.Errorf("fn's term %+v; want %q led by %q in term %d", term, name, id, lock.Fence())
					case time.Since(term.Since) > 10*time.Second || term.Since.After(time.Now()):
						t.Errorf("term since %v, not just now", term.Since)
					}
					mu.Lock()
					terms = append(terms, term.Fence)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					return nil
				}, dlock.WithIdentity(id), dlock.WithRetryDelay(20*time.Millisecond))
				if err != nil {
					t.Errorf("Lead: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if len(terms) != 9 {
		t.Fatalf("%d terms, want 9", len(terms))
	}
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Fatalf("terms in the order they began: %v; term %d is not above the one before", terms, i)
		}
	}
}

func (s *suite) nobodyLeads(t *testing.T) {
	wantLeader(t, s.newLocker(t), dlock.Term{Name: lockcheck.Key(t)})
}

// Leader names the leader while it leads, from another Locker, and nobody
// once it resigned; two candidates of one Locker publish their own
// identities.
func (s *suite) leaderNamesLeader(t *testing.T) {
	l, other := s.newLocker(t), s.newLocker(t)
	name := lockcheck.Key(t)
	for _, id := range []string{"alpha", "beta"} {
		var term dlock.Term
		err := dlock.Lead(lockcheck.Ctx(t), l, name, 10*time.Second, func(ctx context.Context) error {
			term, _ = dlock.TermFromContext(ctx)
			wantLeader(t, other, term)
			return nil
		}, dlock.WithIdentity(id))
		if err != nil {
			t.Fatalf("Lead: %v", err)
		}
		wantLeader(t, other, dlock.Term{Name: name})
	}
}

// countingLocker counts the attempts of the Locker it wraps (which must be
// a ReleaseNotifier), and says when the first one was refused.
type countingLocker struct {
	dlock.Locker
	refused chan struct{}
	once    sync.Once
}

func (c *countingLocker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	lock, err := c.Locker.TryAcquire(ctx, key, ttl)
	if errors.Is(err, dlock.ErrNotAcquired) {
		c.once.Do(func() { close(c.refused) })
	}
	return lock, err
}

func (c *countingLocker) NotifyRelease(ctx context.Context, key string) (<-chan struct{}, func()) {
	return c.Locker.(driver.ReleaseNotifier).NotifyRelease(ctx, key)
}

// A resignation hands the leadership to the waiting candidate at once,
// not at its next poll (10s away), when the backend announces releases.
func (s *suite) resignWakesNext(t *testing.T) {
	a := s.newLocker(t)
	b := s.newLocker(t)
	if n, ok := b.(driver.ReleaseNotifier); !ok || func() bool { ch, stop := n.NotifyRelease(lockcheck.Ctx(t), lockcheck.Key(t)); stop(); return ch == nil }() {
		t.Skip("the backend does not announce releases: the next candidate takes over at its next poll")
	}
	name := lockcheck.Key(t)
	resign := make(chan struct{})
	led := make(chan dlock.Term, 1)
	go func() {
		err := dlock.Lead(lockcheck.Ctx(t), a, name, 10*time.Second, func(ctx context.Context) error {
			term, _ := dlock.TermFromContext(ctx)
			led <- term
			<-resign
			return nil
		})
		if err != nil {
			t.Errorf("Lead: %v", err)
		}
	}()
	first := <-led
	cb := &countingLocker{Locker: b, refused: make(chan struct{})}
	var resigned atomic.Int64 // UnixNano
	go func() {
		<-cb.refused
		time.Sleep(50 * time.Millisecond) // let the candidate settle in its wait
		resigned.Store(time.Now().UnixNano())
		close(resign)
	}()
	err := dlock.Lead(lockcheck.Ctx(t), cb, name, 10*time.Second, func(ctx context.Context) error {
		took := time.Since(time.Unix(0, resigned.Load()))
		term, _ := dlock.TermFromContext(ctx)
		if term.Fence <= first.Fence {
			t.Errorf("the next term %d is not above %d", term.Fence, first.Fence)
		}
		if took > 3*time.Second {
			t.Errorf("the next candidate led %v after the resignation, with a 10s poll: the release did not wake it", took)
		}
		t.Logf("hand-off after a resignation: %v", took)
		return nil
	}, dlock.WithRetryDelay(10*time.Second), dlock.WithRetryJitter(0))
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
}

// A leadership whose lock lapses ends with ErrLockLost; Lead campaigns
// again for a higher term, or returns the loss with WithRecampaign(false).
func (s *suite) lossCampaignsAgain(t *testing.T) {
	if s.lapse == nil {
		t.Skip("no WithLapse: a leadership cannot be lost on cue")
	}
	l := s.newLocker(t)
	name := lockcheck.Key(t)
	var terms []uint64
	err := dlock.Lead(lockcheck.Ctx(t), l, name, 2*time.Second, func(ctx context.Context) error {
		term, _ := dlock.TermFromContext(ctx)
		terms = append(terms, term.Fence)
		if len(terms) > 1 {
			return nil
		}
		s.lapse(t, name)
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrLockLost) {
			t.Errorf("the term ended with %v, want ErrLockLost", cause)
		}
		return context.Cause(ctx)
	}, dlock.WithExtendThreshold(1900*time.Millisecond))
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
	if len(terms) != 2 || terms[1] <= terms[0] {
		t.Fatalf("terms %v: want two, the second above the first", terms)
	}

	err = dlock.Lead(lockcheck.Ctx(t), l, name, 2*time.Second, func(ctx context.Context) error {
		s.lapse(t, name)
		<-ctx.Done()
		return nil
	}, dlock.WithExtendThreshold(1900*time.Millisecond), dlock.WithRecampaign(false))
	lockcheck.WantError(t, err, dlock.ErrLockLost)
}

// observer collects what Observe yields, for the test to wait on.
type observer struct {
	terms chan dlock.Term
	stop  context.CancelFunc
	done  chan struct{}
}

func observe(t *testing.T, l dlock.Locker, name string) *observer {
	c, stop := context.WithCancel(lockcheck.Ctx(t))
	o := &observer{terms: make(chan dlock.Term, 100), stop: stop, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for term, err := range dlock.Observe(c, l, name, dlock.WithRetryDelay(10*time.Millisecond), dlock.WithRetryJitter(10*time.Millisecond)) {
			if err != nil {
				t.Errorf("Observe: %v", err)
				continue
			}
			o.terms <- term
		}
	}()
	t.Cleanup(func() { stop(); <-o.done })
	return o
}

// next returns the next term observed, within 10s.
func (o *observer) next(t *testing.T) dlock.Term {
	t.Helper()
	select {
	case term := <-o.terms:
		return term
	case <-time.After(10 * time.Second):
		t.Fatal("Observe reported no change within 10s")
	}
	return dlock.Term{}
}

// An observer sees nobody, a leader, nobody after its resignation, the
// next leader with a higher term, and nobody after that one's lock
// expired.
func (s *suite) observeSequence(t *testing.T) {
	name := lockcheck.Key(t)
	o := observe(t, s.newLocker(t), name)
	if first := o.next(t); first.Led {
		t.Fatalf("first observed %v, want nobody", first)
	}
	l := s.newLocker(t)
	var term dlock.Term
	err := dlock.Lead(lockcheck.Ctx(t), l, name, 10*time.Second, func(ctx context.Context) error {
		term, _ = dlock.TermFromContext(ctx)
		wantObserved(t, o.next(t), term, readsTerms(l))
		return nil
	}, dlock.WithIdentity("first"))
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
	if got := o.next(t); got.Led {
		t.Fatalf("after the resignation observed %v, want nobody", got)
	}

	// A lock taken by Acquire with an identity, and left to expire.
	lock, err := dlock.Acquire(lockcheck.Ctx(t), l, name, lockcheck.TTL, dlock.WithIdentity("second"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer lock.Release(context.Background())
	wantObserved(t, o.next(t), dlock.Term{Name: name, Led: true, Leader: "second", Fence: lock.Fence()}, readsTerms(l))
	if lock.Fence() <= term.Fence {
		t.Fatalf("fence %d after term %d", lock.Fence(), term.Fence)
	}
	s.lapseLock(t, name, lock)
	if got := o.next(t); got.Led {
		t.Fatalf("after the lock expired observed %v, want nobody", got)
	}
	select {
	case got := <-o.terms:
		t.Fatalf("observed %v after nobody, with nothing changed", got)
	case <-time.After(200 * time.Millisecond):
	}
}

func wantObserved(t *testing.T, got, want dlock.Term, exact bool) {
	t.Helper()
	if !got.Led || got.Name != want.Name || exact && (got.Leader != want.Leader || got.Fence != want.Fence) {
		t.Fatalf("observed %v (%+v), want %v", got, got, want)
	}
}

// Two Candidates: one leads, the other campaigns; Resign hands over, and
// IsLeader follows.
func (s *suite) candidate(t *testing.T) {
	name := lockcheck.Key(t)
	c1, err := dlock.Campaign(lockcheck.Ctx(t), s.newLocker(t), name, 10*time.Second, dlock.WithIdentity("c1"))
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	defer c1.Resign(context.Background())
	lockcheck.Eventually(t, 10*time.Second, func() error { return c1.IsLeader(lockcheck.Ctx(t)) })
	t1, ok := c1.Term()
	if !ok || t1.Leader != "c1" || t1.Fence == 0 {
		t.Fatalf("c1 leads with term %+v, %v", t1, ok)
	}
	c2, err := dlock.Campaign(lockcheck.Ctx(t), s.newLocker(t), name, 10*time.Second, dlock.WithIdentity("c2"), dlock.WithRetryDelay(20*time.Millisecond))
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	defer c2.Resign(context.Background())
	lockcheck.WantError(t, c2.IsLeader(lockcheck.Ctx(t)), dlock.ErrNotAcquired)
	wantLeader(t, s.newLocker(t), t1)

	// IsLeader, Term and Resign at once, from many goroutines.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				_ = c1.IsLeader(lockcheck.Ctx(t))
				c1.Term()
			}
		})
	}
	if err := c1.Resign(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	wg.Wait()
	lockcheck.WantError(t, c1.IsLeader(lockcheck.Ctx(t)), dlock.ErrNotAcquired)
	lockcheck.Eventually(t, 10*time.Second, func() error { return c2.IsLeader(lockcheck.Ctx(t)) })
	t2, _ := c2.Term()
	if t2.Fence <= t1.Fence || t2.Leader != "c2" {
		t.Fatalf("after c1's term %d, c2 leads in %+v", t1.Fence, t2)
	}
	if err := c2.Resign(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	lockcheck.WantError(t, c2.IsLeader(lockcheck.Ctx(t)), dlock.ErrNotAcquired)
	wantLeader(t, s.newLocker(t), dlock.Term{Name: name})
	if err := c2.Resign(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("a second Resign: %v", err)
	}
}

// A Candidate whose lock lapses stops saying it leads by the end of its
// validity; without recampaigning, its campaign ends with the loss.
func (s *suite) candidateLoses(t *testing.T) {
	if s.lapse == nil {
		t.Skip("no WithLapse: a leadership cannot be lost on cue")
	}
	name := lockcheck.Key(t)
	ttl := time.Second
	c, err := dlock.Campaign(lockcheck.Ctx(t), s.newLocker(t), name, ttl, dlock.WithRecampaign(false), dlock.WithExtendThreshold(900*time.Millisecond))
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	defer c.Resign(context.Background())
	lockcheck.Eventually(t, 10*time.Second, func() error { return c.IsLeader(lockcheck.Ctx(t)) })
	lapsed := time.Now()
	s.lapse(t, name)
	lockcheck.Eventually(t, ttl+5*time.Second, func() error {
		if c.IsLeader(lockcheck.Ctx(t)) == nil {
			return errors.New("IsLeader still nil")
		}
		return nil
	})
	if d := time.Since(lapsed); d > ttl+time.Second {
		t.Errorf("IsLeader said nil for %v after the lock lapsed, with a ttl of %v", d, ttl)
	}
	lockcheck.WantError(t, c.IsLeader(lockcheck.Ctx(t)), dlock.ErrNotAcquired)
	lockcheck.WantError(t, c.Resign(lockcheck.Ctx(t)), dlock.ErrLockLost)
}

// A campaign whose context ends returns as Acquire does, without running
// fn.
func (s *suite) cancelledCampaign(t *testing.T) {
	name := lockcheck.Key(t)
	holder := lockcheck.MustAcquire(t, s.newLocker(t), name, 10*time.Second)
	c, cancel := context.WithTimeout(lockcheck.Ctx(t), 200*time.Millisecond)
	defer cancel()
	err := dlock.Lead(c, s.newLocker(t), name, 10*time.Second, func(context.Context) error {
		t.Error("fn ran while another held the lock")
		return nil
	}, dlock.WithRetryDelay(20*time.Millisecond))
	lockcheck.WantError(t, err, dlock.ErrNotAcquired, context.DeadlineExceeded)
	if err := holder.Release(lockcheck.Ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func (s *suite) electionBadInput(t *testing.T) {
	l := s.newLocker(t)
	fn := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil fn", dlock.Lead(lockcheck.Ctx(t), l, lockcheck.Key(t), time.Second, nil)},
		{"nil Locker", dlock.Lead(lockcheck.Ctx(t), nil, lockcheck.Key(t), time.Second, fn)},
		{"empty name", dlock.Lead(lockcheck.Ctx(t), l, "", time.Second, fn)},
		{"zero ttl", dlock.Lead(lockcheck.Ctx(t), l, lockcheck.Key(t), 0, fn)},
		{"empty identity", dlock.Lead(lockcheck.Ctx(t), l, lockcheck.Key(t), time.Second, fn, dlock.WithIdentity(""))},
		{"control character in identity", dlock.Lead(lockcheck.Ctx(t), l, lockcheck.Key(t), time.Second, fn, dlock.WithIdentity("a\nb"))},
	} {
		t.Run(tc.name, func(t *testing.T) { lockcheck.WantError(t, tc.err, dlock.ErrInvalid) })
	}
	_, err := dlock.Leader(lockcheck.Ctx(t), l, "")
	lockcheck.WantError(t, err, dlock.ErrInvalid)
	_, err = dlock.Campaign(lockcheck.Ctx(t), l, "", time.Second)
	lockcheck.WantError(t, err, dlock.ErrInvalid)
	n := 0
	for term, err := range dlock.Observe(lockcheck.Ctx(t), l, "") {
		n++
		if term.Led {
			t.Errorf("Observe of an empty name reported %v", term)
		}
		lockcheck.WantError(t, err, dlock.ErrInvalid)
	}
	if n != 1 {
		t.Fatalf("Observe of an empty name yielded %d times, want once", n)
	}
}
