package dlock

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Term is one leadership of an election: a grant of the lock on its name,
// whose fence is the term number, so terms strictly increase per name on
// every backend. Led is false when nobody leads; the other fields but Name
// are zero then. A leader's Leader, Fence and Since are zero where the
// backend cannot tell them (see Leader).
type Term struct {
	Name   string    // the election: the lock's key
	Led    bool      // whether someone leads
	Leader string    // the leader's identity (WithIdentity), as published with its grant
	Fence  uint64    // the term number: the fence of the leader's grant
	Since  time.Time // when the leadership began, where the backend knows it
}

// String describes t on one line: "nobody leads NAME", or "ID leads NAME
// in term N".
func (t Term) String() string {
	who := cmp.Or(t.Leader, "an unnamed holder")
	switch {
	case !t.Led:
		who = "nobody"
	case t.Leader == "" && t.Fence == 0:
		who = "someone"
	}
	s := who + " leads " + strconv.Quote(t.Name)
	if t.Led && t.Fence != 0 {
		s += " in term " + strconv.FormatUint(t.Fence, 10)
	}
	return s
}

// termReader is driver.TermReader.
type termReader interface {
	ReadTerm(ctx context.Context, key string) (Term, error)
}

type termKey struct{}

// TermFromContext returns the term of the leadership that Lead (or a
// Candidate) runs its function for with ctx, and false when ctx does not
// come from Lead.
func TermFromContext(ctx context.Context) (Term, bool) {
	t, ok := ctx.Value(termKey{}).(Term)
	return t, ok
}

// Lead runs fn while this process leads the election name, on l: it
// campaigns as Acquire waits for a lock, then holds it through Do, whose
// options apply too: fn's context carries the Term (TermFromContext) and
// ends with cause ErrLockLost the moment the leadership may be lost; the
// resignation (the release, which wakes the next candidate) comes after
// fn returned.
//
// After a loss Lead campaigns again for a new term, with a new grant and a
// higher fence (WithRecampaign(false): it returns the loss). It returns
// what Do returns when fn returns, what Acquire returns when ctx ends while
// it campaigns, and at once ErrInvalid or what waiting cannot change. Each
// grant publishes the candidate's identity (WithIdentity; host:pid by
// default), for Leader and Observe.
//
// A leader that is paused (GC, SIGSTOP, a frozen VM) past its validity
// can still act when it resumes, beside the next leader, before it looks
// at its context: the lease cannot stop it, the fence can. Pass the term
// (Term.Fence) to every resource the leader writes (see package fence).
func Lead(ctx context.Context, l Locker, name string, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return bridge.Invalidf("nil function")
	}
	cfg, err := leadConfig(ctx, l, name, ttl, opts)
	if err != nil {
		return err
	}
	return lead(ctx, l, name, ttl, &cfg, fn)
}

func leadConfig(ctx context.Context, l Locker, name string, ttl time.Duration, opts []Option) (config, error) {
	if err := checkCall(ctx, l, "election", name); err != nil {
		return config{}, err
	}
	cfg, err := doConfig(ctx, l, ttl, opts)
	if err == nil && cfg.identity == "" {
		cfg.identity = defaultIdentity()
	}
	return cfg, err
}

// checkCall refuses a nil Locker or context and, unless what is "", an
// empty name of what.
func checkCall(ctx context.Context, l Locker, what, name string) error {
	switch {
	case l == nil:
		return bridge.Invalidf("nil Locker")
	case ctx == nil:
		return bridge.Invalidf("nil context")
	case what != "" && name == "":
		return bridge.Invalidf("empty %s name", what)
	}
	return nil
}

func lead(ctx context.Context, l Locker, name string, ttl time.Duration, cfg *config, fn func(ctx context.Context) error) error {
	for {
		err := do(ctx, l, name, ttl, cfg, func(ctx context.Context) error {
			lock := LockFromContext(ctx)
			t := Term{Name: name, Led: true, Leader: cfg.identity, Fence: lock.Fence(), Since: lock.grantedAt}
			return fn(context.WithValue(ctx, termKey{}, t))
		})
		if !errors.Is(err, ErrLockLost) || cfg.stopOnLoss || ctx.Err() != nil {
			return err
		}
	}
}

// defaultIdentity is host:pid, the host cut to 32 bytes for every backend.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || checkIdentity(host) != nil {
		host = "localhost"
	}
	if len(host) > 32 {
		host = host[:32]
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

const probeTTL = time.Second

// Leader returns who leads the election name on l now, as its backend
// reports it, or a Term whose Led is false when nobody leads: that is an
// answer, not an error. It returns an error matching ErrUnavailable when
// the backend could not be reached (or, on Redlock, no majority agrees on
// a holder), and ErrInvalid for bad arguments.
//
// It reads the holder through l's driver.TermReader (every backend of this
// repository has one; a lock taken by Do or `dlock run` is reported too,
// with its holder record's host:pid where it has one). A Locker without
// it is probed with TryAcquire for one second: a grant means nobody led,
// and is released at once; a refusal means someone leads, who and in
// which term unknown. A probe holds the lock for a round trip, delaying a
// candidate's attempt, and draws a fence; its events reach the Locker's
// observers like any grant.
func Leader(ctx context.Context, l Locker, name string) (Term, error) {
	if err := checkCall(ctx, l, "election", name); err != nil {
		return Term{Name: name}, err
	}
	if r, ok := l.(termReader); ok {
		t, err := r.ReadTerm(ctx, name)
		if err != nil || !t.Led {
			return Term{Name: name}, err
		}
		t.Name = name
		return t, nil
	}
	lock, err := l.TryAcquire(ctx, name, probeTTL)
	switch {
	case err == nil:
		_ = releaseDetached(ctx, lock, probeTTL) // if unknown, the probe's lock lapses within probeTTL
		return Term{Name: name}, nil
	case errors.Is(err, ErrNotAcquired) && ctx.Err() == nil:
		return Term{Name: name, Led: true}, nil
	}
	return Term{Name: name}, err
}

// Observe reports who leads the election name on l, as a sequence of
// terms: the state at the start, then each change it sees, "nobody" (Led
// false) included, until ctx ends or the loop breaks. It never yields a
// lower term after a higher one: a read whose fence is below one already
// yielded is taken for a stale answer and skipped.
//
// It reads the leader as Leader does, every WithRetryDelay (50ms by
// default) plus up to WithRetryJitter (50ms), so a leadership shorter than
// that may be missed, and a hand-off within it shows as one term following
// the other. An error (the backend unreachable, no Redlock majority
// agreeing) is yielded with a Term naming only the election, and the
// reading goes on: the next answer is yielded even if unchanged. An error
// that reading again cannot change (ErrInvalid) is yielded last.
func Observe(ctx context.Context, l Locker, name string, opts ...Option) iter.Seq2[Term, error] {
	return func(yield func(Term, error) bool) {
		cfg, err := newConfig(ctx, l, opts)
		if err != nil {
			yield(Term{Name: name}, err)
			return
		}
		var last Term   // the last answer yielded
		var high uint64 // the highest fence yielded
		fresh := true   // the next answer is yielded even if unchanged
		for {
			t, err := Leader(ctx, l, name)
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil:
				fresh = true
				if !yield(t, err) || errors.Is(err, ErrInvalid) {
					return
				}
			case t.Led && t.Fence != 0 && t.Fence < high: // a stale answer
			case fresh || t.Led != last.Led || t.Leader != last.Leader || t.Fence != last.Fence:
				fresh, last, high = false, t, max(high, t.Fence)
				if !yield(t, nil) {
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.jittered(cfg.retryDelay)):
			}
		}
	}
}
