package pgqueue_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testkit/testproxy"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/pgqueue"
)

// shared is the cluster every test of the package uses.
var shared *testsrv.Postgres

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if testsrv.FuzzWorker() {
		return m.Run() // the fuzz targets need no server
	}
	dir, err := os.MkdirTemp("", "pgqueue-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if shared, err = testsrv.NewPostgres(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Stop()
	os.Setenv("DATABASE_URL", shared.DSN()) // for the examples
	code := m.Run()
	shared.Stop()
	if code == 0 {
		if err := testproxy.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(testCtx(t))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

var errFlaky = errors.New("worker gave up on its batch")

// 8 workers claim 1,000 jobs in batches; a third of the batches roll back
// (an error from the worker, or a panic). Every job's effect is written
// exactly once, rolled-back jobs are done by someone later, and nothing is
// left in the queue.
func TestQueueExactlyOnce(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 12)
	table := "jobs_" + strings.ToLower(t.Name())
	q, err := pgqueue.NewQueue(table)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	t.Cleanup(func() {
		shared.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+table+"_done")
	})
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+"_done (job bigint NOT NULL, worker int NOT NULL)"); err != nil {
		t.Fatal(err)
	}

	const jobs = 1000
	payloads := make([][]byte, jobs)
	for i := range payloads {
		payloads[i] = binary.BigEndian.AppendUint64(nil, uint64(i))
	}
	ids, err := q.Enqueue(ctx, pool, payloads...)
	if err != nil || len(ids) != jobs {
		t.Fatalf("Enqueue: %d ids, %v", len(ids), err)
	}
	payloadOf := make(map[int64]uint64, jobs)
	for i, id := range ids {
		payloadOf[id] = uint64(i)
	}

	var committed, rolledBack atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				n, err := func() (n int, err error) {
					defer func() {
						if r := recover(); r != nil {
							if r != "worker panicked" {
								panic(r)
							}
							n, err = 0, errFlaky
						}
					}()
					return q.Work(ctx, pool, 1+rng.IntN(20), func(ctx context.Context, tx pgx.Tx, batch []pgqueue.Job) error {
						for _, j := range batch {
							if got := binary.BigEndian.Uint64(j.Payload); got != payloadOf[j.ID] {
								return fmt.Errorf("job %d: payload %d, want %d", j.ID, got, payloadOf[j.ID])
							}
							if _, err := tx.Exec(ctx, "INSERT INTO "+table+"_done (job, worker) VALUES ($1, $2)", j.ID, w); err != nil {
								return err
							}
						}
						switch rng.IntN(6) {
						case 0:
							return errFlaky
						case 1:
							panic("worker panicked")
						}
						return nil
					})
				}()
				switch {
				case errors.Is(err, errFlaky):
					rolledBack.Add(1)
				case err != nil:
					t.Errorf("worker %d: %v", w, err)
					return
				case n > 0:
					committed.Add(int64(n))
				default:
					// Nothing free: done unless others hold jobs that
					// may still roll back.
					var left int
					if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&left); err != nil {
						t.Errorf("count: %v", err)
						return
					}
					if left == 0 {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()

	var rows, distinct, workers int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT job), count(DISTINCT worker) FROM "+table+"_done").Scan(&rows, &distinct, &workers); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs done by %d workers; %d batches rolled back and redone", distinct, workers, rolledBack.Load())
	if rows != jobs || distinct != jobs || committed.Load() != jobs || left != 0 {
		t.Fatalf("effects %d rows for %d distinct jobs, %d committed, %d left; want %d, %d, %d, 0", rows, distinct, committed.Load(), left, jobs, jobs, jobs)
	}
	if rolledBack.Load() == 0 || workers < 2 {
		t.Fatalf("%d rollbacks over %d workers: the test did not exercise what it claims", rolledBack.Load(), workers)
	}
}

// Claim skips rows other transactions hold instead of waiting for them.
func TestQueueClaimSkipsLocked(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 3)
	table := "jobs_" + strings.ToLower(t.Name())
	q, err := pgqueue.NewQueue("public." + table)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	if _, err := q.Enqueue(ctx, pool, []byte("a"), []byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	tx1, tx2 := begin(t, pool), begin(t, pool)
	first, err := q.Claim(ctx, tx1, 2)
	if err != nil || len(first) != 2 || string(first[0].Payload) != "a" || string(first[1].Payload) != "b" {
		t.Fatalf("first claim: %+v, %v; want jobs a and b, oldest first", first, err)
	}
	start := time.Now()
	second, err := q.Claim(ctx, tx2, 10)
	if err != nil || len(second) != 1 || len(second[0].Payload) != 0 {
		t.Fatalf("second claim: %+v, %v; want the one free job (empty payload)", second, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("second claim waited %v for locked rows", d)
	}
	tx1.Rollback(ctx) // a and b are back
	third, err := q.Claim(ctx, tx2, 10)
	if err != nil || len(third) != 2 {
		t.Fatalf("claim after the rollback: %+v, %v; want a and b again", third, err)
	}
	tx2.Commit(ctx)
}

func TestQueueBadInput(t *testing.T) {
	for _, name := range []string{"", "a.b.c", ".x", "x."} {
		if _, err := pgqueue.NewQueue(name); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewQueue(%q): %v", name, err)
		}
	}
	q, err := pgqueue.NewQueue(`odd "name"`) // quoted, not injected
	if err != nil {
		t.Fatal(err)
	}
	pool := shared.Pool(t, 1)
	tx := begin(t, pool)
	if _, err := q.Claim(testCtx(t), tx, 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Claim(0): %v", err)
	}
	if _, err := q.Work(testCtx(t), pool, 1, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Work(nil fn): %v", err)
	}
	_, err = q.Claim(testCtx(t), tx, 1)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("got error %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "Queue.Migrate") {
		t.Errorf("missing table not explained: %v", err)
	}
}

// A queue table made by hand works when its id numbers itself, as NewQueue
// documents; one whose id has no default is refused with an error that says
// what to change, not reported as an unreachable server.
func TestQueueHandMadeTable(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 2)
	for _, tc := range []struct {
		name, id string
		ok       bool
	}{
		{"identity", "id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", true},
		{"bigserial", "id bigserial PRIMARY KEY", true},
		{"no_default", "id bigint PRIMARY KEY", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := "jobs_hand_made_" + tc.name
			if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" ("+tc.id+", payload bytea)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { shared.Exec(context.Background(), "DROP TABLE "+table) })
			q, err := pgqueue.NewQueue(table)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := q.Enqueue(ctx, pool, []byte("a"), nil)
			if !tc.ok {
				if !errors.Is(err, dlock.ErrInvalid) {
					t.Fatalf("got error %v, want ErrInvalid", err)
				}
				if errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "IDENTITY") {
					t.Fatalf("Enqueue on a table whose id has no default: %v; want ErrInvalid alone, saying how to number ids", err)
				}
				return
			}
			if err != nil || len(ids) != 2 {
				t.Fatalf("Enqueue: %v, %v", ids, err)
			}
			n, err := q.Work(ctx, pool, 10, func(ctx context.Context, tx pgx.Tx, jobs []pgqueue.Job) error {
				if len(jobs) != 2 || string(jobs[0].Payload) != "a" || len(jobs[1].Payload) != 0 || jobs[0].ID != ids[0] {
					return fmt.Errorf("claimed %+v, want a then the empty payload", jobs)
				}
				return nil
			})
			if err != nil || n != 2 {
				t.Fatalf("Work: %d, %v", n, err)
			}
		})
	}
}

// Enqueue leaves the caller's slice alone: one batch, with a nil payload,
// goes to two queues at once (the race detector sees any write to it).
func TestQueueEnqueueSharedBatch(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 2)
	batch := [][]byte{[]byte("a"), nil, []byte("c")}
	var wg sync.WaitGroup
	for i := range 2 {
		table := fmt.Sprintf("jobs_shared_batch_%d", i)
		q, err := pgqueue.NewQueue(table)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shared.Exec(context.Background(), "DROP TABLE "+table) })
		wg.Go(func() {
			if ids, err := q.Enqueue(ctx, pool, batch...); err != nil || len(ids) != 3 {
				t.Errorf("Enqueue into %s: %v, %v", table, ids, err)
			}
		})
	}
	wg.Wait()
	if batch[1] != nil {
		t.Fatalf("Enqueue replaced the caller's nil payload with %q", batch[1])
	}
}
