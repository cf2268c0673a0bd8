package pgfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/dlock-go/dlock/pglock"
)

// A fenced read-modify-write of one row: register the holder's fence
// before reading, then write with the same fence, all in one transaction.
// A holder whose lock was lost is refused and changes nothing.
func ExampleTable_Update() {
	ctx := context.Background()
	// The table has two extra columns for the guard:
	//   fence numeric(20,0), fence_holder text (both NULL at first).
	accounts, err := pgfence.NewTable("fenced_values", "id")
	if err != nil {
		panic(err)
	}
	id := idSeq.Add(1)
	if _, err := pool.Exec(ctx, "INSERT INTO fenced_values (id, value) VALUES ($1, '100')", id); err != nil {
		panic(err)
	}

	locker, err := pglock.New(pool)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	name := fmt.Sprint("account-", id)
	// An earlier holder, whose lock is gone by the time its write arrives.
	old, err := locker.TryAcquire(ctx, name, 30*time.Second)
	if err != nil {
		panic(err)
	}
	old.Release(ctx)

	lock, err := locker.TryAcquire(ctx, name, 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := accounts.Register(ctx, tx, id, lock.Fence(), lock.Token()); err != nil {
			return err // stale: roll back
		}
		var balance string
		if err := tx.QueryRow(ctx, "SELECT value FROM fenced_values WHERE id = $1", id).Scan(&balance); err != nil {
			return err
		}
		return accounts.Update(ctx, tx, id, lock.Fence(), lock.Token(), map[string]any{"value": balance + "+20"})
	})
	fmt.Println("holder's write:", err)

	// The earlier holder's late write:
	err = accounts.Update(ctx, pool, id, old.Fence(), old.Token(), map[string]any{"value": "0"})
	fmt.Println("stale write refused:", errors.Is(err, fence.ErrStale))
	// Output:
	// holder's write: <nil>
	// stale write refused: true
}

// The guards on database/sql, here with pgx's driver (registered as "pgx"
// by importing github.com/jackc/pgx/v5/stdlib); sqlx, GORM, ent and bun
// hand out the same *sql.Tx. Wrap the transaction with SQL.
func ExampleSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	locker, err := pglock.New(pool) // any dlock backend gives a fence
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	lock, err := locker.TryAcquire(ctx, "nightly-report", 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	if err := guard.Register(ctx, pgfence.SQL(tx), "nightly-report", lock.Fence(), lock.Token()); err != nil {
		panic(err) // stale: the lock was lost; write nothing
	}
	// ... the transaction's reads and writes, all fenced ...
	fmt.Println("commit:", tx.Commit())
	// Output:
	// commit: <nil>
}
