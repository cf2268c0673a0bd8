package pglock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
)

var _ driver.TermReader = (*Locker)(nil)

// termSQL finds the session that holds an advisory lock, and its
// application_name (PostgreSQL shows it to every role).
const termSQL = `SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.state = 'active', false)` +
	heldSQL + `
	AND l.classid::int8 = $1 AND l.objid::int8 = $2 AND l.objsubid = $3`

// ReadTerm implements driver.TermReader: who holds the lock on key (mapped
// as TryAcquire maps it), from pg_locks and pg_stat_activity, in one query.
// A grant made with an identity (driver.Identity; see dlock.WithIdentity
// for its bounds here) publishes it with its fence in its session's
// application_name, in the statement that takes the lock:
// "name (#<fence> <identity>)", or "#<fence> <identity>" where the name
// leaves no room. So the term and leader of any process's holder are read
// from the server; Since only for this Locker's own locks. Another
// session's lock without such a record has Fence 0 and no Leader; one
// caught in the statement that takes it, before its record, is read again
// a millisecond later, a few times (where the role may see the session's
// state: for sessions of the same role, and with pg_read_all_stats). It
// returns an error matching dlock.ErrUnavailable when the query fails.
func (l *Locker) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	return l.readTerm(ctx, key, nil)
}

// ReadTerm implements driver.TermReader for the lock on the Locker's Key.
func (kl keyLocker) ReadTerm(ctx context.Context, name string) (dlock.Term, error) {
	return kl.l.readTerm(ctx, name, &kl.k)
}

// termRereads is how many times readTerm reads again, a millisecond
// apart, a holder caught running a statement without a term record: the
// one writing it, which a loaded server can stretch to tens of
// milliseconds between the lock and the record, or a long one that
// writes none (a transaction lock's), which costs a Leader call about a
// quarter of a second.
const termRereads = 200

func (l *Locker) readTerm(ctx context.Context, name string, key *Key) (dlock.Term, error) {
	k, err := l.resolve(ctx, name, key, nil)
	if err != nil {
		return dlock.Term{}, err
	}
	classid, objid, objsubid := k.lockID()
	return backend.Reread(ctx, termRereads, func() (dlock.Term, bool, error) {
		var pid int32
		var app string
		var active bool // running a statement, as far as the role may see
		err := l.pool.QueryRow(ctx, termSQL, classid, objid, objsubid).Scan(&pid, &app, &active)
		if errors.Is(err, pgx.ErrNoRows) {
			return dlock.Term{}, false, nil
		}
		if err != nil {
			return dlock.Term{}, false, fmt.Errorf("dlock: leader %q: %w: %w", name, dlock.ErrUnavailable, nodeErr(l.node, err))
		}
		if own, ok := l.ownLocks()[lockID{classid, objid, int32(objsubid), pid}]; ok {
			return dlock.Term{Led: true, Leader: own.identity, Fence: own.fence, Since: own.since}, false, nil
		}
		fence, leader, rec := parseTerm(app)
		return dlock.Term{Led: true, Leader: leader, Fence: fence}, !rec && active, nil
	})
}
