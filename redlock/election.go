package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/holder"
	"github.com/dlock-go/dlock/internal/rinspect"
)

var _ driver.TermReader = (*Locker)(nil)

// publishTerm writes the term record of an election's grant, with its
// fence, on every node where its key holds the token, and waits for a
// majority of the writes (a node timeout at most).
func (l *Locker) publishTerm(ctx context.Context, g *grant, since time.Time, identity string, ttl time.Duration) {
	rec := holder.Term(l.cfg.HolderHead, since, identity, g.token, uint64(g.fence))
	c := vote(context.WithoutCancel(ctx), l, sending{timeout: l.timeout(ttl), after: g.acquiring}, func(ctx context.Context, _ int, n *node) error {
		return n.WriteHolders(ctx, g.keys, g.token, rec, ttl)
	})
	for ok := 0; c.left > 0 && ok < l.quorum; {
		if c.out[c.next(nil)] == nil {
			ok++
		}
	}
	g.holder = rec
}

// termRereads is how many times ReadTerm reads again, a millisecond apart,
// an election's grant whose record does not have its fence yet.
const termRereads = 5

// ReadTerm implements driver.TermReader: who holds the lock on key, as a
// majority of the nodes report it (each node read in one MULTI/EXEC). The
// holder is the token that a majority of the nodes hold, and nobody leads
// when a majority hold no key; anything else (the nodes split, too few
// answering) is an error matching dlock.ErrUnavailable with a *QuorumError.
//
// Leader, Fence and Since come from the holder records an election's grant
// (driver.Identity) writes on each node in its own round trip, and again
// with the lock's fence, before TryAcquire returns (docs/election.md). A
// holder with only WithHolderInfo's record (host:pid, its Leader) or none
// (no Leader) has Fence 0: no node knows the lock's fence.
func (l *Locker) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	if err := l.cfg.CheckRead(ctx, key); err != nil {
		return dlock.Term{}, err
	}
	return backend.Reread(ctx, termRereads, func() (dlock.Term, bool, error) { return l.readTerm(ctx, key) })
}

// readTerm returns what a majority of the nodes report of key's holder,
// and whether it is an election's grant whose fence is not published yet.
func (l *Locker) readTerm(ctx context.Context, key string) (_ dlock.Term, pending bool, _ error) {
	full := l.cfg.Prefix + key
	terms := make([]rinspect.Term, len(l.nodes)) // each node's, read before it answers
	errs := vote(ctx, l, sending{timeout: l.nodeTimeout}, func(ctx context.Context, i int, n *node) error {
		var err error
		if terms[i], err = rinspect.ReadTerm(ctx, n.Client, full); err != nil {
			return l.nodeErr(err, l.nodeTimeout)
		}
		return nil
	}).all()
	votes := map[string]int{}
	best := 0
	for i, err := range errs {
		if err == nil {
			votes[terms[i].Token]++
			best = max(best, votes[terms[i].Token])
		}
	}
	for tok, n := range votes { // at most one has a majority
		if n < l.quorum {
			continue
		}
		if tok == "" {
			return dlock.Term{}, false, nil // a majority holds no key
		}
		t := dlock.Term{Led: true}
		for i, r := range terms {
			if rec := r.Record; errs[i] == nil && r.Token == tok && rec != nil {
				t.Leader, t.Since, t.Fence = rec.Leader(), rec.Since, max(t.Fence, rec.Fence)
				pending = rec.Identity != ""
			}
		}
		return t, pending && t.Fence == 0, nil
	}
	qe, _ := l.tally("leader", errs, nil, nil)
	qe.Got, qe.Reason = best, "no majority of the nodes agrees on a holder, or on none"
	return dlock.Term{}, false, l.withCtx(ctx, fmt.Errorf("dlock: leader %q: %w", key, qe))
}
