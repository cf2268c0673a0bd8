package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/dlock-go/dlock/internal/testkit/servers"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/pgqueue"
)

// pgTTL is how long a PostgreSQL lock's handle trusts its session without
// a health check: Do checks at half of it, so a killed session is noticed
// within about a second.
const pgTTL = 2 * time.Second

// postgresInstalled says whether PostgreSQL server binaries are installed
// (a variable, so that a test can pretend they are not).
var postgresInstalled = func() bool {
	_, err := servers.PostgresBin()
	return err == nil
}

// postgresHint is the line printed where no PostgreSQL is installed.
const postgresHint = "PostgreSQL: no server binaries under /usr/lib/postgresql/*/bin; install them (apt-get install postgresql) and run dlock demo again to see advisory locks, a killed session and SKIP LOCKED."

var postgresScenario = scenario{
	title:   "PostgreSQL: the lock lives as long as its session",
	short:   "PostgreSQL",
	summary: "a killed session's lock went to B; A's late write was refused; each job ran once",
	proves: []string{
		"An advisory lock is held by a database session, with no TTL on the server: PostgreSQL frees it",
		"the moment the session ends, and the holder learns of it only when it next asks (Do: at its",
		"next health check). The fence still decides: B's is higher, so A's late write was refused.",
		"For a queue, row locks do the work: SKIP LOCKED gives each job to one worker, and a batch",
		"whose transaction rolls back goes back to the queue instead of getting lost.",
	},
	run: runPostgres,
}

func runPostgres(ctx context.Context, e *env, s *section) error {
	dir, err := os.MkdirTemp("", "dlock-demo-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pg, err := servers.NewPostgres(dir, servers.PostgresNoTemplate())
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer pg.Stop()
	s.say("A temporary PostgreSQL cluster on 127.0.0.1:%d (initdb in a temporary directory, removed", pg.Port)
	s.say("at the end). A and B are two processes, each with its own connection pool.")
	var pools [2]*pgxpool.Pool
	var lockers [2]*pglock.Locker
	for i := range pools {
		if pools[i], err = pgxpool.NewWithConfig(ctx, pg.PoolConfig(4)); err != nil {
			return err
		}
		defer pools[i].Close()
		if lockers[i], err = pglock.New(pools[i], pglock.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
			return err
		}
		defer lockers[i].Close()
	}
	if err := pglock.Migrate(ctx, pools[1]); err != nil {
		return err
	}
	for _, sql := range []string{
		"CREATE TABLE demo_ledger (id int PRIMARY KEY, value text, fence numeric(20,0), fence_holder text)",
		"INSERT INTO demo_ledger (id, value) VALUES (1, 'initial')",
		"CREATE TABLE demo_done (job bigint NOT NULL, worker int NOT NULL)",
	} {
		if _, err := pools[1].Exec(ctx, sql); err != nil {
			return err
		}
	}
	if err := postgresLoss(ctx, e, s, pg, lockers, pools); err != nil {
		return err
	}
	s.say("")
	return postgresQueue(ctx, s, pools[1])
}

// heldBy is what A's Do tells about its lock.
type heldBy struct {
	fence uint64
	token string
}

// postgresLoss: A holds a lock in Do; its session is terminated; B gets
// the lock with a higher fence and writes; A's late write is refused, and
// A's Do reports the loss.
func postgresLoss(ctx context.Context, e *env, s *section, pg *servers.Postgres, lockers [2]*pglock.Locker, pools [2]*pgxpool.Pool) error {
	doCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	held, done := make(chan heldBy, 1), make(chan error, 1)
	var noticed time.Time
	tA := time.Now()
	wg.Go(func() {
		done <- dlock.Do(doCtx, lockers[0], "ledger", pgTTL, func(ctx context.Context) error {
			lock := dlock.LockFromContext(ctx)
			held <- heldBy{lock.Fence(), lock.Token()}
			<-ctx.Done()
			noticed = time.Now()
			return context.Cause(ctx)
		})
	})
	var a heldBy
	select {
	case a = <-held:
	case err := <-done:
		return fmt.Errorf("holder A could not acquire: %w", err)
	}
	s.result(`A takes "ledger" in Do (pg_try_advisory_lock)`, fmt.Sprintf("fence %d (from the dlock_fence sequence)", a.fence), true, "")
	pid, err := heldByWhom(ctx, s, lockers[1])
	if err != nil {
		return err
	}
	s.say("The database ends A's session: pg_terminate_backend(%d) (an operator, a failover, a restart).", pid)
	tKill := time.Now()
	if err := pg.Terminate(ctx, uint32(pid)); err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	lockB, err := dlock.Acquire(wctx, lockers[1], "ledger", 10*pgTTL)
	wcancel()
	if err != nil {
		return fmt.Errorf("holder B could not acquire after A's session ended: %w", err)
	}
	defer lockB.Release(context.WithoutCancel(ctx))
	tB := time.Now()
	s.result("B, waiting, gets the lock", fmt.Sprintf("fence %d after %v", lockB.Fence(), tB.Sub(tKill).Round(time.Millisecond)),
		lockB.Fence() > a.fence, fmt.Sprintf("a fence above %d", a.fence))
	if err := fencedWrites(ctx, e, s, pools, a, lockB); err != nil {
		return err
	}

	var doErr error
	select {
	case doErr = <-done:
	case <-time.After(5 * pgTTL):
		return fmt.Errorf("holder A's Do did not notice the end of its session within %v", 5*pgTTL)
	}
	s.result("A's Do: its function's context ends with", fmt.Sprintf("%s, %v after the kill", errName(doErr), noticed.Sub(tKill).Round(time.Millisecond)),
		errors.Is(doErr, dlock.ErrLockLost), "ErrLockLost")
	e.tl.Bar(e.scene+"PostgreSQL: A", tA, tKill, timeline.Held, "A's session holds the lock")
	e.tl.Bar(e.scene+"PostgreSQL: A", tKill, noticed, timeline.HeldLost, "A's session is gone; A does not know yet")
	e.tl.Bar(e.scene+"PostgreSQL: B", tB, time.Now(), timeline.Held, "B holds the lock")
	return nil
}

// heldByWhom shows, as B sees it, which session holds "ledger"
// (pg_locks, through Inspect) and that B cannot take it; it returns the
// session's pid.
func heldByWhom(ctx context.Context, s *section, b *pglock.Locker) (int, error) {
	infos, err := b.Inspect(ctx, "ledger", 0)
	if err != nil {
		return 0, err
	}
	pid := 0
	if len(infos) == 1 {
		pid = infos[0].PID
	}
	s.result("pg_locks: the session that holds it", fmt.Sprintf("%d lock, pid %d", len(infos), pid), pid != 0, "A's session")
	_, err = b.TryAcquire(ctx, "ledger", pgTTL)
	s.result("B tries to take it", acquired(err), errors.Is(err, dlock.ErrNotAcquired), "false (ErrNotAcquired)")
	return pid, nil
}

// fencedWrites: B writes the ledger row with its fence, then A's late
// write (through another connection of its pool) arrives with A's.
func fencedWrites(ctx context.Context, e *env, s *section, pools [2]*pgxpool.Pool, a heldBy, lockB *dlock.Lock) error {
	ledger, err := pgfence.NewTable("demo_ledger", "id")
	if err != nil {
		return err
	}
	err = ledger.Update(ctx, pools[1], 1, lockB.Fence(), lockB.Token(), map[string]any{"value": "B"})
	s.result(fmt.Sprintf("B writes the row with fence %d (pgfence)", lockB.Fence()), accepted(err), err == nil, "accepted")
	tWA := time.Now()
	err = ledger.Update(ctx, pools[0], 1, a.fence, a.token, map[string]any{"value": "A"})
	s.result(fmt.Sprintf("A's late write with fence %d, on another connection", a.fence), accepted(err), errors.Is(err, fence.ErrStale), "rejected (ErrStale)")
	var value string
	if err := pools[1].QueryRow(ctx, "SELECT value FROM demo_ledger WHERE id = 1").Scan(&value); err != nil {
		return err
	}
	s.result("value of the row", strconv.Quote(value), value == "B", `"B"`)
	e.tl.Mark(e.scene+"PostgreSQL: A", tWA, timeline.Rejected, fmt.Sprintf("A's late write with fence %d: rejected", a.fence))
	return nil
}

const (
	queueJobs    = 20
	queueWorkers = 4
	queueBatch   = 3
	queueWork    = 20 * time.Millisecond // each batch's work
)

// errCrash is worker 1's batch failing on purpose.
var errCrash = errors.New("worker 1 fails its batch")

// postgresQueue: workers claim jobs with SKIP LOCKED; one batch rolls
// back; every job is done exactly once.
func postgresQueue(ctx context.Context, s *section, pool *pgxpool.Pool) error {
	q, err := pgqueue.NewQueue("demo_jobs")
	if err != nil {
		return err
	}
	if err := q.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := q.Enqueue(ctx, pool, make([][]byte, queueJobs)...); err != nil {
		return err
	}
	s.say("%d jobs in a queue table; %d workers claim batches of %d with FOR UPDATE SKIP LOCKED (pgqueue.Queue)", queueJobs, queueWorkers, queueBatch)
	s.say("and record each job they do in the same transaction. Worker 1's first batch fails and rolls back.")
	rolledBack, perWorker, together, err := runWorkers(ctx, q, pool)
	if err != nil {
		return err
	}
	var total, distinct, redone, left int
	err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT job), count(*) FILTER (WHERE job = ANY($1)),
		(SELECT count(*) FROM demo_jobs) FROM demo_done`, rolledBack).Scan(&total, &distinct, &redone, &left)
	if err != nil {
		return err
	}
	s.result("jobs done, and done more than once", fmt.Sprintf("%d, %d", distinct, total-distinct), distinct == queueJobs && total == distinct, fmt.Sprintf("%d, 0", queueJobs))
	s.result(fmt.Sprintf("the rolled-back batch's jobs (%v), done later", rolledBack), fmt.Sprintf("%d of %d", redone, len(rolledBack)),
		len(rolledBack) > 0 && redone == len(rolledBack), "all")
	s.result("jobs left in the queue", strconv.Itoa(left), left == 0, "0")
	s.result("jobs done by each worker", strings.Trim(fmt.Sprint(perWorker), "[]"), true, "")
	s.result("batches in progress at once, at most", strconv.Itoa(together), true, "")
	return nil
}

// runWorkers has worker 1 claim a batch and fail (its transaction rolls
// back), then runs every worker until the queue is empty. It returns the
// ids of the batch that rolled back, how many jobs each worker did, and
// how many batches were in progress at once, at most.
func runWorkers(ctx context.Context, q *pgqueue.Queue, pool *pgxpool.Pool) (rolledBack []int64, perWorker []int, together int, err error) {
	_, err = q.Work(ctx, pool, queueBatch, func(ctx context.Context, tx pgx.Tx, jobs []pgqueue.Job) error {
		for _, j := range jobs {
			rolledBack = append(rolledBack, j.ID)
		}
		return errCrash
	})
	if !errors.Is(err, errCrash) {
		return nil, nil, 0, fmt.Errorf("worker 1's failing batch: %v", err)
	}
	perWorker = make([]int, queueWorkers)
	errs := make([]error, queueWorkers)
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for w := range queueWorkers {
		wg.Go(func() {
			for {
				n, err := q.Work(ctx, pool, queueBatch, func(ctx context.Context, tx pgx.Tx, jobs []pgqueue.Job) error {
					raiseMax(&maxInside, inside.Add(1))
					defer inside.Add(-1)
					if err := sleep(ctx, queueWork); err != nil { // the job's work
						return err
					}
					for _, j := range jobs {
						if _, err := tx.Exec(ctx, "INSERT INTO demo_done (job, worker) VALUES ($1, $2)", j.ID, w+1); err != nil {
							return err
						}
					}
					return nil
				})
				if err == nil && n == 0 { // nothing free: done, or the others hold the rest
					var left int
					if err = pool.QueryRow(ctx, "SELECT count(*) FROM demo_jobs").Scan(&left); err == nil && left == 0 {
						return
					}
					if err == nil {
						err = sleep(ctx, 5*time.Millisecond)
					}
				}
				if err != nil {
					errs[w] = err
					return
				}
				perWorker[w] += n
			}
		})
	}
	wg.Wait()
	return rolledBack, perWorker, int(maxInside.Load()), errors.Join(errs...)
}
