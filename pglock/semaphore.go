package pglock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
)

// semaphoreTable holds a row per semaphore name (prefix included).
const semaphoreTable = "dlock_semaphore"

// The statements of a grant, in its transaction. semBeginSQL bounds how
// long a client stopped mid-grant keeps the row locked: the server ends
// its session then.
const (
	semBeginSQL  = `BEGIN; SET LOCAL idle_in_transaction_session_timeout = 5000`
	semRecordSQL = `INSERT INTO ` + semaphoreTable + ` AS s (name, permits, slots) VALUES ($1, $2, $2)
	ON CONFLICT (name) DO UPDATE SET permits = s.permits RETURNING permits, slots`
	semHeldSQL = `SELECT coalesce(array_agg(k.i - 1), '{}') FROM unnest($1::int8[], $2::int8[], $3::int2[]) WITH ORDINALITY AS k(c, o, s, i)
	WHERE EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::int8 = k.c AND objid::int8 = k.o AND objsubid = k.s)`
	semUpdateSQL = `UPDATE ` + semaphoreTable + ` SET permits = $2, slots = $3 WHERE name = $1`
	semLimitSQL  = `UPDATE ` + semaphoreTable + ` SET permits = $2, slots = greatest(slots, $2) WHERE name = $1`
)

var _ driver.Semaphores = (*Locker)(nil)

// Semaphore implements driver.Semaphores (see dlock.Semaphore and
// Semaphores in the package documentation).
func (l *Locker) Semaphore(limit int) dlock.Locker { return semaphore{l, limit} }

// semaphore is the Locker of Semaphore.
type semaphore struct {
	l     *Locker
	limit int
}

func (s semaphore) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	l := s.l
	return l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) {
		if err := cmp.Or(l.cfg.CheckPermit(ctx, name, ttl, s.limit), l.checkTTL(ttl)); err != nil {
			return nil, err
		}
		id, err := identity(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := l.pin(ctx, name)
		if err != nil {
			return nil, err
		}
		slot, k, err := l.semTake(ctx, conn, name, s.limit)
		if err != nil {
			return nil, err
		}
		g, validUntil, err := l.grantOn(ctx, conn, bridge.SlotKey(name, slot), k, id, ttl)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			_ = g.end(true, false, err)
			return nil, acquireErr(ctx, name, l.node, err)
		}
		return driver.NewPermit(name, slot, bridge.NewToken(), g.fence, validUntil, g), nil
	})
}

// semTake is semPick, which returns the slot to take, ending the
// transaction on an error: conn goes back to the pool after a refusal
// (another limit, every permit held), or is discarded.
func (l *Locker) semTake(ctx context.Context, conn *pgxpool.Conn, name string, limit int) (int, Key, error) {
	slot, keys, err := l.semPick(ctx, conn, name, limit)
	switch {
	case err == nil:
		return slot, keys[slot], nil
	case errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrInvalid):
		if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			discard(conn)
		} else {
			conn.Release()
		}
		if errors.Is(err, dlock.ErrNotAcquired) {
			l.busy(keys[0]) // waits register on every slot
		}
		return 0, Key{}, err
	}
	discard(conn)
	return 0, Key{}, acquireErr(ctx, name, l.node, err)
}

// semPick begins the grant's transaction, locks name's row, and picks the
// lowest free slot below the limit: an error matching dlock.ErrInvalid
// when the row has another limit, dlock.ErrNotAcquired when limit or more
// permits are held (on every slot that may be held). A row with no permit
// held is void: the limit becomes this one's. The row is updated as needed.
func (l *Locker) semPick(ctx context.Context, conn *pgxpool.Conn, name string, limit int) (slot int, keys []Key, err error) {
	full := l.semRow(name)
	if _, err := conn.Exec(ctx, semBeginSQL); err != nil {
		return 0, nil, err
	}
	var permits, slots int
	if err := conn.QueryRow(ctx, semRecordSQL, full, limit).Scan(&permits, &slots); err != nil {
		return 0, nil, err
	}
	if keys, err = l.slotKeys(name, max(slots, limit)); err != nil {
		return 0, nil, err
	}
	var held []int
	var c, o []int64
	var s []int16 // pg_locks' view of the keys, column by column
	for _, k := range keys {
		kc, ko, ks := k.lockID()
		c, o, s = append(c, kc), append(o, ko), append(s, ks)
	}
	if err := conn.QueryRow(ctx, semHeldSQL, c, o, s).Scan(&held); err != nil {
		return 0, nil, err
	}
	switch {
	case len(held) == 0:
		permits, slots = limit, limit
	case permits != limit:
		return 0, keys, backend.LimitConflict(name, permits, limit)
	case len(held) >= permits:
		return 0, keys, fmt.Errorf("dlock: acquire %q: %w (all %d permits are held)", name, dlock.ErrNotAcquired, permits)
	}
	for slices.Contains(held, slot) {
		slot++
	}
	high := max(permits, slot+1)
	for _, h := range held {
		high = max(high, h+1)
	}
	if high != slots || len(held) == 0 {
		if _, err := conn.Exec(ctx, semUpdateSQL, full, permits, high); err != nil {
			return 0, nil, err
		}
	}
	return slot, keys, nil
}

// semRow is name's row: the prefix and its slots' common start ("{name}#"),
// so that names sharing slots ("a" and "{a}") share a row.
func (l *Locker) semRow(name string) []byte { return []byte(l.cfg.Prefix + bridge.SlotPrefix(name)) }

// slotKeys returns the keys of the first n slots of name's semaphore.
func (l *Locker) slotKeys(name string, n int) ([]Key, error) {
	keys := make([]Key, n)
	for i := range keys {
		k, err := l.mapKey(bridge.SlotKey(name, i))
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// SetLimit implements driver.Semaphores (see dlock.SetLimit): one UPDATE
// of name's row, which waits for a grant in progress. The slots that may
// be held stay counted (docs/semaphores.md). A name with no row was never
// used: nothing to change.
func (l *Locker) SetLimit(ctx context.Context, name string, limit int) error {
	if err := l.cfg.CheckLimit(ctx, name, limit); err != nil {
		return err
	}
	if _, err := l.pool.Exec(ctx, semLimitSQL, l.semRow(name), limit); err != nil {
		return fmt.Errorf("dlock: set limit %q: %w: %w", name, dlock.ErrUnavailable, nodeErr(l.node, err))
	}
	return nil
}

// NotifyRelease implements driver.ReleaseNotifier: the release of any of
// name's permits wakes the wait.
func (s semaphore) NotifyRelease(ctx context.Context, name string) (<-chan struct{}, func()) {
	l := s.l
	if !l.notify || l.cfg.CheckLimit(ctx, name, s.limit) != nil {
		return nil, func() {}
	}
	keys, err := l.slotKeys(name, s.limit)
	if err != nil {
		return nil, func() {}
	}
	return l.notifyKeys(keys...)
}

// semLimits sets the Limit of the permits among infos. A database without
// semaphoreTable has no semaphores.
func (l *Locker) semLimits(ctx context.Context, infos []dlock.LockInfo) error {
	rows := map[string][]int{} // row name → indexes in infos
	var names [][]byte
	for i, info := range infos {
		if prefix, ok := bridge.SlotPrefixOf(info.Key); ok {
			row := l.cfg.Prefix + prefix
			if rows[row] == nil {
				names = append(names, []byte(row))
			}
			rows[row] = append(rows[row], i)
		}
	}
	if len(names) == 0 {
		return nil
	}
	var name []byte
	var permits int
	r, _ := l.pool.Query(ctx, `SELECT name, permits FROM `+semaphoreTable+` WHERE name = ANY($1)`, names)
	_, err := pgx.ForEachRow(r, []any{&name, &permits}, func() error {
		for _, i := range rows[string(name)] {
			infos[i].Limit = permits
		}
		return nil
	})
	if err != nil && sqlState(err) != codeUndefinedTable {
		return fmt.Errorf("dlock: inspect: %w: %w", dlock.ErrUnavailable, nodeErr(l.node, err))
	}
	return nil
}
