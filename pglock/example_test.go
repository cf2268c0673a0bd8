package pglock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
)

func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // ideally a pool reserved for locks
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// Once, at deployment: the fence counter table.
	if err := pglock.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	locker, err := pglock.New(pool)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lock, err := locker.TryAcquire(ctx, "example:invoice-run", 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "example:invoice-run", 10*time.Second)
	fmt.Println("second holder refused:", errors.Is(err, dlock.ErrNotAcquired))

	fmt.Println("release:", lock.Release(ctx))
	fmt.Println("release again:", errors.Is(lock.Release(ctx), dlock.ErrNotHeld))
	// Output:
	// second holder refused: true
	// release: <nil>
	// release again: true
}

func Example_do() {
	ctx := context.Background()
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // ideally a pool reserved for locks
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	locker, err := pglock.New(pool)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	// The ttl is how long the lock is trusted between health checks of its
	// session: Do checks every 2.5s here and cancels ctx with
	// dlock.ErrLockLost within about that long of the session dying.
	err = dlock.Do(ctx, locker, "example:nightly-report", 5*time.Second, func(ctx context.Context) error {
		// ... work ...
		if ctx.Err() != nil {
			return context.Cause(ctx) // lock lost: stop before writing
		}
		fence := dlock.LockFromContext(ctx).Fence() // pass it to the resource
		_ = fence
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// Do: <nil>
}

// A transaction-level lock serializes work inside one transaction; commit
// or rollback releases it, so a crashed worker can never leave it held.
//
// The transaction must be READ COMMITTED (the default): a REPEATABLE READ or
// SERIALIZABLE one reads from a snapshot its first statement took, before
// the lock was granted, and misses what the previous holder committed.
func ExampleLockTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // ideally a pool reserved for locks
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		fence, err := pglock.LockTx(ctx, tx, pglock.HashKey("example:invoice-numbers"))
		if err != nil {
			return err
		}
		// ... allocate the next invoice number in tx ...
		_ = fence
		return nil
	}) // the lock ends here
	fmt.Println("committed:", err)
	// Output:
	// committed: <nil>
}

// The same on database/sql, here with pgx's driver (registered as "pgx" by
// importing github.com/jackc/pgx/v5/stdlib); sqlx, GORM, ent and bun hand
// out the same *sql.Tx.
func ExampleLockSQLTx() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	fence, err := pglock.LockSQLTx(ctx, tx, pglock.HashKey("example:invoice-numbers"))
	if err != nil {
		panic(err)
	}
	// ... allocate the next invoice number in tx ...
	_ = fence
	fmt.Println("committed:", tx.Commit()) // the lock ends here
	// Output:
	// committed: <nil>
}

// HashKey's number is computable in SQL, so other programs take the same
// lock.
func ExampleHashKey() {
	k := pglock.HashKey("invoice:42")
	n, _ := k.Int64()
	fmt.Println(n)

	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // ideally a pool reserved for locks
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	var sql int64
	err = pool.QueryRow(context.Background(),
		`SELECT ('x' || left(encode(sha256(convert_to('invoice:42', 'UTF8')), 'hex'), 16))::bit(64)::bigint`).Scan(&sql)
	fmt.Println(sql == n, err)
	// Output:
	// 6688477336110245193
	// true <nil>
}

// WithKeyFunc puts names into the two-int4 key space, e.g. one lock per
// (tenant, job) pair that a SQL job also locks with pg_advisory_lock(a, b).
func ExampleWithKeyFunc() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // ideally a pool reserved for locks
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	locker, err := pglock.New(pool, pglock.WithKeyFunc(func(name string) (pglock.Key, error) {
		tenant, job, ok := strings.Cut(name, "/")
		a, err1 := strconv.ParseInt(tenant, 10, 32)
		b, err2 := strconv.ParseInt(job, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return pglock.Key{}, fmt.Errorf("want tenant/job, two int32")
		}
		return pglock.KeyPair(int32(a), int32(b)), nil
	}))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "7/1001", time.Minute)
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)
	var free bool
	pool.QueryRow(ctx, "SELECT pg_try_advisory_lock(7, 1001)").Scan(&free)
	fmt.Println("pg_try_advisory_lock(7, 1001) from SQL:", free)

	_, err = locker.TryAcquire(ctx, "not-a-pair", time.Minute)
	fmt.Println(errors.Is(err, dlock.ErrInvalid))
	// Output:
	// pg_try_advisory_lock(7, 1001) from SQL: false
	// true
}
