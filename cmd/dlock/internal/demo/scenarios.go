package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/redislock"
)

// The expiry scenarios' timing: A's lock lives 200ms, A
// works 300ms, B arrives when A's lock is gone, A finishes 100ms later.
const (
	shortTTL = 200 * time.Millisecond
	stall    = 300 * time.Millisecond
	afterB   = 100 * time.Millisecond
	longTTL  = 10 * time.Second // outlives every scenario step
)

func (e *env) key(name string) string { return e.prefix + name }

// locker returns a new single-node Locker on the first server; close
// closes it (its release subscription) with the rest.
func (e *env) locker(opts ...redislock.Option) (*redislock.Locker, error) {
	l, err := redislock.New(e.nodes[0].direct, opts...)
	if err == nil {
		e.lockers = append(e.lockers, l)
	}
	return l, err
}

// holds reports whether key on the single node holds token right now.
func (e *env) holds(ctx context.Context, key, token string) (bool, error) {
	v, err := e.nodes[0].direct.Get(ctx, key).Result()
	if err == redis.Nil {
		return false, nil
	}
	return err == nil && v == token, err
}

var basicScenario = scenario{
	title:   "Basic acquire and release",
	short:   "basic acquire/release",
	summary: "one winner; a wrong token cannot release, the right one can",
	proves: []string{
		"One winner: the second acquirer gets ErrNotAcquired. Release and extension check the token",
		"on the server, so a wrong token changes nothing (ErrNotHeld) and the holder's token works.",
	},
	run: func(ctx context.Context, e *env, s *section) error {
		a, err := e.locker()
		if err != nil {
			return err
		}
		b, err := e.locker()
		if err != nil {
			return err
		}
		key := e.key("payment")

		lockA, err := a.TryAcquire(ctx, key, longTTL)
		got := yesNo(err == nil)
		if err == nil {
			got += fmt.Sprintf(" (fence %d)", lockA.Fence())
		}
		s.result(fmt.Sprintf("A acquires %q for %v", "payment", longTTL), got, err == nil, "true")
		if err != nil {
			return nil
		}
		defer lockA.Release(context.WithoutCancel(ctx))

		lockB, err := b.TryAcquire(ctx, key, longTTL)
		s.result("B acquires while A holds it", acquired(err), errors.Is(err, dlock.ErrNotAcquired), "false (ErrNotAcquired)")
		if lockB != nil {
			lockB.Release(ctx)
		}

		err = b.ReleaseToken(ctx, key, "wrong-token")
		s.result(`release with the token "wrong-token"`, outcome(err), errors.Is(err, dlock.ErrNotHeld), "refused (ErrNotHeld)")
		err = b.ExtendToken(ctx, key, "wrong-token", longTTL)
		s.result(`extend with the token "wrong-token"`, outcome(err), errors.Is(err, dlock.ErrNotHeld), "refused (ErrNotHeld)")
		held, err := e.holds(ctx, key, lockA.Token())
		if err != nil {
			return err
		}
		s.result("the key still holds A's token", yesNo(held), held, "true")

		err = lockA.Extend(ctx, longTTL)
		s.result("A extends its lock", outcome(err), err == nil, "ok")
		err = lockA.Release(ctx)
		s.result("A releases with its own token", outcome(err), err == nil, "ok")
		n, err := e.nodes[0].direct.Exists(ctx, key).Result()
		if err != nil {
			return err
		}
		s.result("key exists afterwards", yesNo(n == 1), n == 0, "false")
		return nil
	},
}

// acquired shows the outcome of an acquisition attempt.
func acquired(err error) string {
	if err == nil {
		return "true"
	}
	return "false (" + errName(err) + ")"
}

var expiryScenario = scenario{
	title:   "The expiry bug: plain DEL vs token-checked release",
	short:   "expiry bug, both ways",
	summary: "plain DEL: two holders; token-checked release: one",
	proves: []string{
		"A's 200ms lock expired while A was still working; B then acquired it legitimately.",
		"With plain DEL, A deleted B's lock, so C acquired it while B was still inside its critical",
		"section: two holders at once. dlock's release checks the token: A was told ErrNotHeld,",
		"B's lock stayed, and C was refused. (A's work after its expiry still overlapped B's: see 4.)",
	},
	run: func(ctx context.Context, e *env, s *section) error {
		s.say("A takes the lock for %v, then works for %v (a slow request, a GC pause). Its lock", shortTTL, stall)
		s.say("expires meanwhile, B acquires it, and %v later A finishes and releases.", afterB)
		for _, plainDEL := range []bool{true, false} {
			if plainDEL {
				s.say("")
				s.say("Released with a plain DEL (the anti-pattern, sent with a raw go-redis client):")
			} else {
				s.say("")
				s.say("Released with dlock's token-checked release (Lock.Release):")
			}
			if err := expiry(ctx, e, s, plainDEL); err != nil {
				return err
			}
		}
		return nil
	},
}

func expiry(ctx context.Context, e *env, s *section, plainDEL bool) error {
	l, err := e.locker()
	if err != nil {
		return err
	}
	key := e.key("expiry")
	if plainDEL {
		key = e.key("expiry-del")
	}
	lane := e.scene + "token release: "
	if plainDEL {
		lane = e.scene + "plain DEL: "
	}
	e.tl.Lane(lane + "A")
	e.tl.Lane(lane + "B")
	tA := time.Now()
	lockA, err := l.TryAcquire(ctx, key, shortTTL)
	if err != nil {
		return fmt.Errorf("holder A could not acquire: %w", err)
	}
	if err := sleep(ctx, stall); err != nil {
		return err
	}
	tB := time.Now()
	lockB, err := l.TryAcquire(ctx, key, longTTL)
	if err != nil {
		return fmt.Errorf("holder B could not acquire after A's lock expired: %w", err)
	}
	defer lockB.Release(context.WithoutCancel(ctx))
	if err := sleep(ctx, afterB); err != nil {
		return err
	}
	tRel := time.Now()
	e.tl.Bar(lane+"A", tA, tA.Add(stall), timeline.Paused, "A stalls; its lock expires meanwhile")
	e.tl.Bar(lane+"A", tA, tRel, timeline.HeldLost, fmt.Sprintf("A believes it holds the lock (its %v lock expired)", shortTTL))
	e.tl.Bar(lane+"A", tB, tRel, timeline.Explained, "A and B inside at once: A's lock expired while it stalled")
	defer func() {
		end := time.Now()
		e.tl.Bar(lane+"B", tB, end, timeline.Held, "B holds the lock")
		e.tl.Bar(lane+"B", tB, tRel, timeline.Explained, "A and B inside at once: A's lock expired while it stalled")
	}()

	if plainDEL {
		n, err := e.nodes[0].direct.Del(ctx, key).Result()
		if err != nil {
			return err
		}
		got := fmt.Sprintf("deleted %d key (B's lock)", n)
		s.result("  A releases with DEL", got, n == 1, "deleted 1 key (B's lock)")
	} else {
		err := lockA.Release(ctx)
		s.result("  A releases with its token", outcome(err), errors.Is(err, dlock.ErrNotHeld), "refused (ErrNotHeld)")
		e.tl.Mark(lane+"A", time.Now(), timeline.Rejected, "A's release: refused (ErrNotHeld), B's lock stays")
	}

	tC := time.Now()
	lockC, err := l.TryAcquire(ctx, key, longTTL)
	if lockC != nil {
		defer lockC.Release(context.WithoutCancel(ctx))
		defer func() {
			end := time.Now()
			e.tl.Bar(lane+"C", tC, end, timeline.Held, "C holds the lock")
			for _, who := range []string{"B", "C"} {
				e.tl.Bar(lane+who, tC, end, timeline.Overlap, "B and C inside at once: A's plain DEL deleted B's lock")
			}
		}()
	}
	if err != nil && !errors.Is(err, dlock.ErrNotAcquired) {
		return fmt.Errorf("holder C's attempt: %w", err)
	}
	cIn := err == nil
	bHolds, err := e.holds(ctx, key, lockB.Token())
	if err != nil {
		return err
	}
	// The plain-DEL half is the anti-pattern: the point is that it
	// fails, so two holders is the expected outcome there.
	s.result("  C acquires while B is still inside its critical section", yesNo(cIn), cIn == plainDEL, yesNo(plainDEL))
	s.result("  B still holds the lock", yesNo(bHolds), bHolds != plainDEL, yesNo(!plainDEL))
	if plainDEL {
		err := lockB.Release(ctx)
		s.result("  B finishes and releases", outcome(err), errors.Is(err, dlock.ErrNotHeld), "refused (ErrNotHeld): C holds it now")
	}
	return nil
}

var luaScenario = scenario{
	title:   "The token-checked release (DELEX or Lua)",
	short:   "token-checked release",
	summary: "DELEX and the Lua scripts both check the token",
	proves: []string{
		"The compare-and-delete and compare-and-expire scripts behave like DELEX and SET IFEQ, so the",
		"same lock is safe on servers older than 8.4 and on Valkey. dlock picks the path per server.",
	},
	run: func(ctx context.Context, e *env, s *section) error {
		path := "Lua"
		if n := e.info.native.Release; n != "" {
			path = strings.ToUpper(n)
		}
		s.say("On this server dlock releases with %s; a stranger's token is refused either way.", path)
		l, err := e.locker()
		if err != nil {
			return err
		}
		key := e.key("lua")
		lock, err := l.TryAcquire(ctx, key, longTTL)
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		defer lock.Release(context.WithoutCancel(ctx))
		err = l.ReleaseToken(ctx, key, "nope")
		s.result(path+` release with the token "nope"`, outcome(err), errors.Is(err, dlock.ErrNotHeld), "refused (ErrNotHeld)")
		err = l.ExtendToken(ctx, key, "nope", longTTL)
		s.result(`extend with the token "nope"`, outcome(err), errors.Is(err, dlock.ErrNotHeld), "refused (ErrNotHeld)")
		err = lock.Extend(ctx, longTTL)
		s.result("extend with the holder's token", outcome(err), err == nil, "ok")
		err = lock.Release(ctx)
		s.result(path+" release with the holder's token", outcome(err), err == nil, "ok")
		n, err := e.nodes[0].direct.Exists(ctx, key).Result()
		if err != nil {
			return err
		}
		s.result("key exists afterwards", yesNo(n == 1), n == 0, "false")
		return nil
	},
}

const workers = 5

var workersScenario = scenario{
	title:   "5 workers through Do",
	short:   "5 workers through Do",
	summary: "never two inside at once (max inside = 1)",
	proves: []string{
		"Do waits for the lock (a release wakes the next waiter; polling with jitter is the fallback),",
		"runs the function, keeps the lock extended while it runs and always releases it: the workers",
		"never overlapped, and each got a larger fence than the one before. A fence on Redis is the",
		"server's clock in microseconds (or the last fence plus one), so it survives a restart that",
		"loses the counter; the steps above are the times between the grants. Keep the TTL longer",
		"than any stall you are willing to accept.",
	},
	run: func(ctx context.Context, e *env, s *section) error {
		const work = 30 * time.Millisecond
		s.say("%d workers call Do on the same key at once; each spends %v inside.", workers, work)
		key := e.key("workers")
		var inside, maxInside, ran atomic.Int32
		var mu sync.Mutex
		var fences []uint64
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for i := range workers {
			l, err := e.locker()
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = dlock.Do(ctx, l, key, 2*time.Second, func(ctx context.Context) error {
					in := time.Now()
					defer func() {
						e.tl.Bar(fmt.Sprintf("%sworker %d", e.scene, i+1), in, time.Now(), timeline.Held, "inside the critical section")
					}()
					raiseMax(&maxInside, inside.Add(1))
					if lock := dlock.LockFromContext(ctx); lock != nil {
						mu.Lock()
						fences = append(fences, lock.Fence())
						mu.Unlock()
					}
					err := sleep(ctx, work)
					inside.Add(-1)
					ran.Add(1)
					return err
				})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("do: %w", err)
		}
		s.result("workers that ran", fmt.Sprint(ran.Load()), ran.Load() == workers, fmt.Sprint(workers))
		s.result("max inside the critical section at once", fmt.Sprint(maxInside.Load()), maxInside.Load() == 1, "1")
		increasing := len(fences) == workers
		for i := 1; i < len(fences); i++ {
			increasing = increasing && fences[i] > fences[i-1]
		}
		s.result("fences in the order the workers entered", fenceSteps(fences), increasing, "strictly increasing")
		return nil
	},
}

// raiseMax raises m to n if n is larger.
func raiseMax(m *atomic.Int32, n int32) {
	for {
		old := m.Load()
		if n <= old || m.CompareAndSwap(old, n) {
			return
		}
	}
}

// fenceSteps prints fences as the first one and each one's step from the one
// before: a Redis fence is the server's clock in microseconds (or one more
// than the last fence, when that is larger), so the steps are the times
// between the grants.
func fenceSteps(fences []uint64) string {
	if len(fences) == 0 {
		return "none"
	}
	var b strings.Builder
	fmt.Fprint(&b, fences[0])
	for i := 1; i < len(fences); i++ {
		if fences[i] > fences[i-1] {
			fmt.Fprintf(&b, ", +%d", fences[i]-fences[i-1])
		} else {
			fmt.Fprintf(&b, ", %d (not above the one before)", fences[i])
		}
	}
	return b.String()
}
