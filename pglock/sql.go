package pglock

import "strconv"

// keyParams are the advisory-lock function arguments of a key ($1, or $1
// and $2 for a pair), and the next parameter's number.
func keyParams(pair bool) (params string, next int) {
	if pair {
		return "($1::int4, $2::int4)", 3
	}
	return "($1::int8)", 2
}

// fenceExpr returns an expression that is NULL when granted (an SQL
// boolean; "" for a lock already held) is false, and otherwise draws the
// next fence and yields it. One CASE, evaluated in order and only as far
// as needed: the lock, nextval (never NULL: its branch only draws), the
// durability check, which must follow nextval, then currval. One CASE, not
// a materialized CTE, and few function calls: both cost (bench/RESULTS.md).
//
// Durability (docs/fences.md, "PostgreSQL"): when the WAL is not flushed
// up to its insert position, or synchronous standbys must confirm, a
// transactional logical message makes the commit flush and wait for them.
func fenceExpr(granted string) string {
	currval := `currval('` + FenceSequence + `')`
	e := `CASE`
	if granted != "" {
		e += ` WHEN NOT ` + granted + ` THEN NULL`
	}
	return e + `
	WHEN ` + nextvalSQL + ` IS NULL THEN NULL
	WHEN current_setting('synchronous_commit') <> 'off'
		AND (pg_current_wal_insert_lsn() > pg_current_wal_flush_lsn() OR current_setting('synchronous_standby_names') <> '')
		THEN CASE WHEN pg_logical_emit_message(true, 'dlock', '') IS NOT NULL THEN ` + currval + ` END
	ELSE ` + currval + ` END`
}

const nextvalSQL = `nextval('` + FenceSequence + `')`

var waitKeySQL = strconv.FormatInt(waitKey, 10)

// statements are a Locker's acquire and release statements, for bigint
// keys ([0]) and pairs ([1]), and the session settings they change; built
// once per Locker, so that pgx prepares each once per connection.
type statements struct {
	settings []string
	acquire  [2]string
	release  [2]string
}

// buildStatements builds the statements that change the settings sets.
// application_name takes two format strings in which %s stands for the
// fence (see publish): the first if its result fits, else the second.
func (l *Locker) buildStatements(sets []string) *statements {
	st := &statements{settings: sets}
	for i, pair := range []bool{false, true} {
		p, next := keyParams(pair)

		// The columns: the fence (NULL when not granted), the backend's
		// pid, and per setting whether it was set (only when granted) and
		// its previous value, read in the CTE before set_config.
		fence := fenceExpr(`pg_try_advisory_lock` + p)
		if len(sets) == 0 {
			st.acquire[i] = `SELECT ` + fence + `, pg_backend_pid()`
		} else {
			cte, sel := `WITH l AS MATERIALIZED (SELECT `+fence+` AS fence`, `SELECT l.fence, pg_backend_pid()`
			n := next
			for j, set := range sets {
				prev, arg := `p`+strconv.Itoa(j), `$`+strconv.Itoa(n)+`::text`
				n++
				if set == "application_name" {
					alt := `$` + strconv.Itoa(n) + `::text`
					n++
					arg = `format(CASE WHEN length(format(` + arg + `, l.fence)) <= ` + strconv.Itoa(maxAppName) +
						` THEN ` + arg + ` ELSE ` + alt + ` END, l.fence)`
				}
				cte += `, current_setting('` + set + `') AS ` + prev
				sel += `, CASE WHEN l.fence IS NOT NULL THEN set_config('` + set + `', ` + arg + `, false) END IS NOT NULL, l.` + prev
			}
			st.acquire[i] = cte + ")\n" + sel + ` FROM l`
		}

		// The release's first column: 0 when the session did not hold the
		// lock, 1 when released, 2 when released with a NOTIFY of the
		// key's notifyID. Waiters are looked for after the unlock (notify.go).
		rel := `SELECT CASE WHEN NOT pg_advisory_unlock` + p + ` THEN 0`
		if l.notify {
			payload := `'i' || $1::int8`
			if pair {
				payload = `'p' || $1::int4 || ',' || $2::int4`
			}
			rel += ` WHEN pg_try_advisory_xact_lock(` + waitKeySQL + `) THEN 1
	WHEN pg_notify('` + notifyChannel + `', ` + payload + `) IS NOT NULL THEN 2`
		}
		rel += ` ELSE 1 END`
		for j, set := range sets {
			rel += `, set_config('` + set + `', $` + strconv.Itoa(next+j) + `::text, false) IS NOT NULL`
		}
		st.release[i] = rel
	}
	return st
}

// sessionSettings are the settings a grant changes and its release
// restores: idle_session_timeout with a lease, application_name when the
// grant publishes something (holder info, an identity).
func (l *Locker) sessionSettings(publish bool) []string {
	sets := make([]string, 0, 2)
	if l.lease >= 0 {
		sets = append(sets, "idle_session_timeout")
	}
	if publish {
		sets = append(sets, "application_name")
	}
	return sets
}
