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

// Errors specific to PostgreSQL. Each comes joined with the dlock sentinel
// that says what the caller can do (errors.Is matches both).
var (
	// ErrNotMigrated means the fence sequence does not exist: run Migrate
	// (or MigrateSQL) once. Comes with dlock.ErrMisconfigured.
	ErrNotMigrated = errors.New("pglock: fence sequence " + FenceSequence + " does not exist (create it with pglock.Migrate)")

	// ErrReadOnly means the server refused to draw a fence: it is a hot
	// standby, whose advisory locks exclude no one on the primary, or the
	// session is read-only. Comes with dlock.ErrMisconfigured.
	ErrReadOnly = errors.New("pglock: server is read-only (a hot standby, or default_transaction_read_only): its advisory locks would exclude no one on the primary")

	// ErrDeadlock means PostgreSQL aborted a waiting lock request to break
	// a deadlock (40P01): the lock is not held and the transaction is
	// aborted; roll it back and retry. Comes with dlock.ErrNotAcquired.
	ErrDeadlock = errors.New("pglock: deadlock detected (40P01)")

	// ErrOutOfLocks means the server's shared lock table is full (53200,
	// "out of shared memory"; it holds max_locks_per_transaction ×
	// max_connections). The lock is not held. Comes with dlock.ErrUnavailable.
	ErrOutOfLocks = errors.New("pglock: server lock table full (53200 out of shared memory; raise max_locks_per_transaction)")

	// ErrPoolExhausted means this Locker's held locks pin every connection
	// of the pool. Comes with dlock.ErrUnavailable.
	ErrPoolExhausted = errors.New("pglock: connection pool exhausted by held locks")

	// ErrSessionChanged means the session behind a held lock's connection
	// is not the one that took the lock: a transaction pooler (pgbouncer in
	// transaction mode), through which session locks cannot work, sits in
	// between. Comes with dlock.ErrLockLost.
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

// nodeErr wraps err, naming the server, in a dlock.NodeError.
func nodeErr(node string, err error) *dlock.NodeError {
	return &dlock.NodeError{Node: node, Err: nodeerr.Describe(err, kind(err))}
}

// kind says what kind of failure err, a pgx call's, is (Errors in the
// package documentation lists the refusals).
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

// migrateErr is an error of Migrate's statements.
func migrateErr(err error) error {
	sentinel := dlock.ErrUnavailable
	if kind(err) == nodeerr.Refused {
		sentinel = dlock.ErrMisconfigured
	}
	return fmt.Errorf("pglock: migrate: %w: %w", sentinel, nodeerr.OneLine(err))
}

// acquireErr classifies an error of an acquisition attempt (session or
// transaction level), which produced no lock.
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
		// The statements name no relation but the fence sequence.
		detail = append(detail, ErrNotMigrated)
	case codeReadOnly:
		detail = append(detail, ErrReadOnly)
	case "53200":
		detail = append(detail, ErrOutOfLocks)
	}
	return fmt.Errorf("dlock: acquire %q: %w", key, nodeerr.Error(ctx, node, err, kind(err), true, detail...))
}
