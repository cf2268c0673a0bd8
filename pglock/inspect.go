package pglock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
)

var _ dlock.Inspector = (*Locker)(nil)

// heldSQL selects the exclusive advisory locks granted in the current
// database (l), with their holders' sessions (a).
const heldSQL = `
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// inspectSQL lists heldSQL's locks and the sessions blocked behind each.
// pg_locks is bounded by the server's lock table, so it is read whole and
// filtered here.
const inspectSQL = `SELECT l.classid::int8, l.objid::int8, l.objsubid::int4, l.pid,
	coalesce(a.application_name, ''), a.backend_start,
	(SELECT count(*) FROM pg_locks w WHERE w.locktype = 'advisory' AND NOT w.granted
		AND w.database = l.database AND w.classid = l.classid AND w.objid = l.objid
		AND w.objsubid = l.objsubid)` + heldSQL

// Inspect lists the exclusive advisory locks held in the Locker's database
// by any session whose names match pattern (see dlock.Inspector), with the
// holder's backend pid (PID) and application_name (Service), and Waiting,
// the sessions blocked in pg_advisory_lock behind it (not pglock's
// waiters, which poll). TTL is 0: a session lock lasts as long as its
// session.
//
// Key is the lock's name where the Locker can know it: for its own locks
// (then Fence and Since are the grant's); for locks whose holder published
// its name (WithHolderInfo, in any process; Service is then the holder's
// service) when this Locker maps that name to the lock's key; and for the
// lock a pattern without glob characters maps to (a glob cannot be matched
// against the names behind a hash). Other locks are "advisory:<n>" (bigint
// keys) or "advisory:<a>,<b>" (int4 pairs), which a pattern may match too.
// For other sessions' locks Since is the session's backend_start, the one
// time never later than the grant (the server does not record the grant's).
//
// At most limit locks are returned (0: 1000), sorted by key.
// It returns an error matching dlock.ErrUnavailable when the query fails.
func (l *Locker) Inspect(ctx context.Context, pattern string, limit int) ([]dlock.LockInfo, error) {
	pattern, match, limit, err := backend.CheckInspect(ctx, pattern, limit)
	if err != nil {
		return nil, err
	}
	var named *Key // the key of pattern when it is a plain name
	if !strings.ContainsAny(pattern, `*?[\`) {
		if k, err := l.mapKey(pattern); err == nil {
			named = &k
		}
	}
	mine := l.ownLocks()
	rows, _ := l.pool.Query(ctx, inspectSQL) // its error comes back from CollectRows
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dlock.LockInfo, error) {
		info, id, err := l.lockInfo(row)
		switch o, ok := mine[id]; {
		case ok:
			info.Key, info.Fence, info.Since = o.name, o.fence, o.since
		case info.Key == "" && named != nil && id.is(*named):
			info.Key = pattern
		case info.Key == "":
			info.Key = advisoryName(id.classid, id.objid, id.objsubid)
		}
		return info, err
	})
	if err != nil {
		return nil, fmt.Errorf("dlock: inspect: %w: %w", dlock.ErrUnavailable, nodeErr(l.node, err))
	}
	out = slices.DeleteFunc(out, func(info dlock.LockInfo) bool { return !match.MatchString(info.Key) })
	slices.SortFunc(out, func(a, b dlock.LockInfo) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), a.PID-b.PID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, l.semLimits(ctx, out)
}

// lockID is how pg_locks shows a held advisory lock, with its holder's
// backend pid.
type lockID struct {
	classid, objid int64
	objsubid, pid  int32
}

// is reports whether the lock is on key k.
func (id lockID) is(k Key) bool {
	c, o, s := k.lockID()
	return c == id.classid && o == id.objid && int32(s) == id.objsubid
}

// ownLocks returns the locks this Locker holds.
func (l *Locker) ownLocks() map[lockID]*grant {
	mine := map[lockID]*grant{}
	l.grants.Range(func(k, _ any) bool {
		mine[k.(*grant).lockID()] = k.(*grant)
		return true
	})
	return mine
}

// lockInfo reads one row of inspectSQL, with the name its holder
// published, if any, as Key.
func (l *Locker) lockInfo(row pgx.CollectableRow) (info dlock.LockInfo, id lockID, err error) {
	var app string
	var started pgtype.Timestamptz
	var waiting int64
	if err := row.Scan(&id.classid, &id.objid, &id.objsubid, &id.pid, &app, &started, &waiting); err != nil {
		return info, id, err
	}
	info = dlock.LockInfo{Node: l.node, PID: int(id.pid), Service: app, Waiting: int(waiting), Majority: true}
	if started.Valid {
		info.Since = started.Time
	}
	if name, service, ok := l.publishedName(app, id); ok {
		info.Key, info.Service = name, service
	}
	if fence, who, ok := parseTerm(app); ok {
		info.Fence, info.Service = fence, who // an election's leader: its term and identity
	}
	return info, id, nil
}

// advisoryName names a lock whose name the Locker does not know.
func advisoryName(classid, objid int64, objsubid int32) string {
	if objsubid == 2 {
		return "advisory:" + strconv.Itoa(int(int32(uint32(classid)))) + "," + strconv.Itoa(int(int32(uint32(objid))))
	}
	return "advisory:" + strconv.FormatInt(int64(uint64(classid)<<32|uint64(objid)), 10)
}
