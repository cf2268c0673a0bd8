package pgqueue_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/pgqueue"
)

// Eight workers would run this loop; each job is done exactly once, and a
// batch whose transaction fails goes back to the queue.
func ExampleQueue_Work() {
	ctx := context.Background()
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // ideally a pool reserved for locks
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	q, err := pgqueue.NewQueue("example_mail_jobs")
	if err != nil {
		panic(err)
	}
	if err := q.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	defer pool.Exec(ctx, "DROP TABLE example_mail_jobs")
	if _, err := q.Enqueue(ctx, pool, []byte("alice"), []byte("bob"), []byte("carol")); err != nil {
		panic(err)
	}

	for {
		n, err := q.Work(ctx, pool, 2, func(ctx context.Context, tx pgx.Tx, jobs []pgqueue.Job) error {
			for _, j := range jobs {
				fmt.Println("job", string(j.Payload))
				// Write the job's effect with tx, so it commits with the claim.
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
		if n == 0 {
			break
		}
	}
	// Output:
	// job alice
	// job bob
	// job carol
}
