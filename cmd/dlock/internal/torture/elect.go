package torture

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// The election scenario's worker events.
const (
	evObserve = "observe" // an observer's report: Held (led), Val (leader), Fence (term), Err
)

// identity is the identity a candidate publishes: "w" and its id.
func identity(w int) string { return "w" + strconv.Itoa(w) }

// quiet returns how long a candidate must wait at t before it campaigns:
// the rest of the quiet window it is in, if any. The windows are the last
// eight TTLs of every sixteen, on the machine's clock, so every process
// agrees on them: the candidates queued when one begins lead in turn
// (three of them, a TTL at most each), and then nobody leads for five
// TTLs or more, longer than lingerAfter for TTLs of 500ms and up.
func quiet(ttl time.Duration, t time.Time) time.Duration {
	period := 16 * ttl
	in := time.Duration(t.UnixNano() % int64(period))
	if in < period/2 {
		return 0
	}
	return period - in
}

// observePoll is how often an observer reads the leader.
const observePoll = 20 * time.Millisecond

// observe is an observer's run: it follows every key's leader with
// dlock.Observe and reports each term it yields, until ctx ends.
func (w *worker) observe(ctx context.Context) {
	var wg sync.WaitGroup
	for _, key := range w.cfg.Keys {
		wg.Go(func() {
			for t, err := range dlock.Observe(ctx, w.locker, w.name(key), dlock.WithRetryDelay(observePoll), dlock.WithRetryJitter(observePoll)) {
				e := Event{Ev: evObserve, Key: key, Held: t.Led, Val: t.Leader, Fence: t.Fence, Err: sentinels(err)}
				if err != nil {
					e.Msg = oneLine(err.Error())
				}
				w.emit(e)
			}
		})
	}
	wg.Wait()
}

// name is the lock name of key: pglock has no prefix option.
func (w *worker) name(key string) string {
	if w.cfg.Backend == Postgres {
		return w.cfg.Prefix + key
	}
	return key
}
