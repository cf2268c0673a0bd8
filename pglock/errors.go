package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/internal/nodeerr"
)

// Errors specific to PostgreSQL. Each one comes joined with the dlock
// sentinel that says what the caller can do (errors.Is matches both), so
// code written against dlock's sentinels keeps working.
var (
	// ErrNotMigrated means the fence sequence does not exist: run Migrate
	// (or MigrateSQL) once. Comes with dlock.ErrMisconfigured.
	ErrNotMigrated = errors.New("pglock: fence sequence " + FenceSequence + " does not exist (create it with pglock.Migrate)")

	// ErrReadOnly means the server refused to draw a fence because it is
	// a hot standby (in recovery), whose advisory locks exclude no one on
	// the primary or other standbys, or the session is read-only. Comes
	// with dlock.ErrMisconfigured.
	ErrReadOnly = errors.New("pglock: server is read-only (a hot standby, or default_transaction_read_only): its advisory locks would exclude no one on the primary")

	// ErrDeadlock means PostgreSQL aborted a waiting lock request to break
	// a deadlock (SQLSTATE 40P01): the lock is not held and the
	// transaction is aborted; roll it back and retry. Comes with
	// dlock.ErrNotAcquired.
	ErrDeadlock = errors.New("pglock: deadlock detected (40P01)")

	// ErrOutOfLocks means the server's shared lock table is full (SQLSTATE
	// 53200, "out of shared memory"): too many locks at once for
	// max_locks_per_transaction × max_connections. The lock is not held.
	// Comes with dlock.ErrUnavailable.
	ErrOutOfLocks = errors.New("pglock: server lock table full (53200 out of shared memory; raise max_locks_per_transaction)")

	// ErrPoolExhausted means every connection of the pool is pinned by a
	// lock this Locker holds, so no connection is left to take another.
	// Comes with dlock.ErrUnavailable.
	ErrPoolExhausted = errors.New("pglock: connection pool exhausted by held locks")

	// ErrSessionChanged means the server-side session behind a held
	// lock's connection is not the one that took the lock: a transaction
	// pooler (pgbouncer in transaction mode) sits in between, and
	// session-level advisory locks cannot work through it. Comes with
	// dlock.ErrLockLost.
	ErrSessionChanged = errors.New("pglock: the backend behind the lock's connection changed (a transaction-mode pooler?)")
)

// SQLSTATE codes pglock tells apart.
const (
	codeUndefinedTable = "42P01"
	codeReadOnly       = "25006"
)

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// serverErr wraps err, naming the server, in a dlock.NodeError.
func (l *Locker) serverErr(err error) error { return nodeErr(l.node, err) }

func nodeErr(node string, err error) *dlock.NodeError {
	return &dlock.NodeError{Node: node, Err: nodeerr.Describe(err, kind(err))}
}

// kind says what kind of failure err, the error of a pgx call, is: a
// refusal that retrying cannot change (Errors in the package doc lists
// them), another error the server sent, or no answer.
func kind(err error) nodeerr.Kind {
	switch code := sqlState(err); {
	case code == "":
		return nodeerr.Unreachable
	case strings.HasPrefix(code, "28"), // invalid authorization: 28000, 28P01 (password)
		code == "42501", code == "3D000", // no privilege, no database
		code == "3F000", // no schema on search_path to create in
		code == codeUndefinedTable, code == codeReadOnly:
		return nodeerr.Refused
	}
	return nodeerr.Answered
}

// migrateErr is an error of Migrate's statements: dlock.ErrMisconfigured
// when the server refused (no right to create the sequence),
// dlock.ErrUnavailable otherwise.
func migrateErr(err error) error {
	sentinel := dlock.ErrUnavailable
	if kind(err) == nodeerr.Refused {
		sentinel = dlock.ErrMisconfigured
	}
	return fmt.Errorf("pglock: migrate: %w: %w", sentinel, nodeerr.OneLine(err))
}

// acquireErr classifies an error of an acquisition attempt (session or
// transaction level). The attempt did not produce a lock.
func acquireErr(ctx context.Context, key string, node string, err error) error {
	var detail []error // pglock's own reason, when it has one
	switch sqlState(err) {
	case "40P01":
		return fmt.Errorf("dlock: acquire %q: %w: %w: %w", key, dlock.ErrNotAcquired, ErrDeadlock, nodeErr(node, err))
	case "55P03":
		return fmt.Errorf("dlock: acquire %q: %w (lock_timeout ran out): %w", key, dlock.ErrNotAcquired, nodeErr(node, err))
	case "57014":
		if ctx.Err() == nil {
			return fmt.Errorf("dlock: acquire %q: %w (statement cancelled, e.g. by statement_timeout): %w", key, dlock.ErrNotAcquired, nodeErr(node, err))
		}
	case codeUndefinedTable:
		// The acquiring statements name no relation but the fence
		// sequence, so no need to read the (translatable) message.
		detail = append(detail, ErrNotMigrated)
	case codeReadOnly:
		detail = append(detail, ErrReadOnly)
	case "53200":
		detail = append(detail, ErrOutOfLocks)
	}
	return fmt.Errorf("dlock: acquire %q: %w", key, nodeerr.Error(ctx, node, err, kind(err), true, detail...))
}
