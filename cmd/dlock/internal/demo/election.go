package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/redislock"
)

// electTTL is the election scenario's lease: A's pause outlasts it.
const electTTL = 500 * time.Millisecond

var electionScenario = scenario{
	title:   "Leader election: a paused leader is stopped by its term",
	short:   "election",
	summary: "B took over in a higher term; the paused leader's late write was refused",
	proves: []string{
		"An election is a lock: the leader runs while it holds the lock, and its term is the grant's",
		"fence. A, frozen past its lease, neither extended nor looked at its context; B took over in a",
		"higher term, and everyone reading the election named B. A woke up still acting as leader: the",
		"lease could not stop it, the term could, because the resource refuses a write from a lower one.",
	},
	run: runElection,
}

// candidate is one side of the election scenario: when it began to lead,
// in which term, and what its Lead returned.
type candidate struct {
	led  chan dlock.Term
	done chan error
}

func newCandidate() *candidate {
	return &candidate{led: make(chan dlock.Term, 1), done: make(chan error, 1)}
}

// lead runs dlock.Lead for c with the identity id: once it leads, it reports
// its term, waits for proceed (never looking at its context: a frozen
// process), writes with its term and returns.
func (c *candidate) lead(ctx context.Context, l *redislock.Locker, name, id string, proceed <-chan struct{}, write func(dlock.Term)) {
	c.done <- dlock.Lead(ctx, l, name, electTTL, func(ctx context.Context) error {
		term, _ := dlock.TermFromContext(ctx)
		c.led <- term
		<-proceed
		write(term)
		return nil
	}, dlock.WithIdentity(id), dlock.WithRecampaign(false), dlock.WithRetryDelay(50*time.Millisecond))
}

func runElection(ctx context.Context, e *env, s *section) error {
	relay, client, err := relayed(e.nodes[0].direct.Options())
	if err != nil {
		return err
	}
	defer func() { client.Close(); relay.Close() }()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
	la, err := redislock.New(client, quiet)
	if err != nil {
		return err
	}
	defer la.Close()
	lb, err := e.locker(quiet)
	if err != nil {
		return err
	}
	name := e.key("scheduler")
	guard := fence.NewMemory()
	var value string
	var aErr, bErr error
	write := func(who string, err *error) func(dlock.Term) {
		return func(t dlock.Term) {
			*err = guard.Write("schedule", t.Fence, who, func() error { value = who; return nil })
		}
	}
	// On every way out, the candidates go on and end before their Lockers
	// are closed.
	wakeA, resignB := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer func() { relay.Blackhole(false); proceed(wakeA); proceed(resignB); cancel() }()
	a, b := newCandidate(), newCandidate()

	tA := time.Now()
	wg.Go(func() { a.lead(ctx, la, name, "A", wakeA, write("A", &aErr)) })
	var termA dlock.Term
	select {
	case termA = <-a.led:
	case err := <-a.done:
		return fmt.Errorf("candidate A could not lead: %w", err)
	}
	s.result(fmt.Sprintf("A campaigns for %q (TTL %v)", "scheduler", electTTL), fmt.Sprintf("leads in term %d", termA.Fence), true, "")
	showLeader(ctx, s, lb, name, "A")

	wg.Go(func() { b.lead(ctx, lb, name, "B", resignB, write("B", &bErr)) })
	s.say("B campaigns too, and waits. A freezes (a GC pause, a stopped VM): it neither extends its")
	s.say("lease nor looks at its context. Its lease runs out on the server.")
	relay.Blackhole(true)
	tB := time.Now()
	var termB dlock.Term
	select {
	case termB = <-b.led:
	case err := <-b.done:
		return fmt.Errorf("candidate B never led after A froze: %w", err)
	}
	tBLed := time.Now()
	s.result("B takes over", fmt.Sprintf("term %d, %v after A froze", termB.Fence, tBLed.Sub(tB).Round(10*time.Millisecond)),
		termB.Fence > termA.Fence, fmt.Sprintf("a term above %d", termA.Fence))
	showLeader(ctx, s, lb, name, "B")
	proceed(resignB) // B writes with its term, then resigns
	if err := <-b.done; err != nil {
		return fmt.Errorf("candidate B's Lead: %w", err)
	}
	s.result(fmt.Sprintf("B writes with term %d and resigns", termB.Fence), accepted(bErr), bErr == nil, "accepted")

	relay.Blackhole(false)
	proceed(wakeA)
	errA := <-a.done
	tWA := time.Now()
	s.result(fmt.Sprintf("A wakes up and writes with term %d", termA.Fence), accepted(aErr), errors.Is(aErr, fence.ErrStale), "rejected (ErrStale)")
	s.result("A's Lead returns", outcome(errA), errors.Is(errA, dlock.ErrLockLost), "lock lost")
	s.result("value of the resource", fmt.Sprintf("%q", value), value == "B", `"B"`)
	showLeader(ctx, s, lb, name, "")

	la1, lb1 := e.scene+"election: A", e.scene+"election: B"
	e.tl.Bar(la1, tA, tB, timeline.Held, fmt.Sprintf("A leads in term %d", termA.Fence))
	e.tl.Bar(la1, tB, tWA, timeline.Paused, "A is frozen; its lease runs out")
	e.tl.Bar(lb1, tBLed, tWA, timeline.Held, fmt.Sprintf("B leads in term %d", termB.Fence))
	e.tl.Mark(la1, tWA, timeline.Rejected, fmt.Sprintf("A's late write in term %d: rejected", termA.Fence))
	return nil
}

// proceed closes ch unless it is closed already.
func proceed(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// showLeader prints who leads name, as anyone reading the election sees it,
// checked against want ("": nobody).
func showLeader(ctx context.Context, s *section, l dlock.Locker, name, want string) {
	t, err := dlock.Leader(ctx, l, name)
	got := "nobody leads"
	switch {
	case err != nil:
		got = "error: " + err.Error()
	case t.Led:
		got = fmt.Sprintf("%s leads in term %d", t.Leader, t.Fence)
	}
	wanted := "nobody leads"
	if want != "" {
		wanted = want + " leads"
	}
	s.result("who leads, read by anyone (dlock.Leader)", got, err == nil && t.Led == (want != "") && t.Leader == want, wanted)
}
