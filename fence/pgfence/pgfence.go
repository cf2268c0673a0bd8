package pgfence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/pgmigrate"
)

// Querier is what the guards need: a pgx.Tx (the usual case: the
// transaction that also writes), a *pgxpool.Pool or a *pgx.Conn; for
// database/sql (a *sql.Tx, *sql.DB or *sql.Conn), wrap the handle with SQL.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNoRow means Table.Update or Table.Register found no row with the given
// id, so there was nothing to fence. Insert rows (with a NULL fence) before
// fencing writes to them.
var ErrNoRow = errors.New("pgfence: no row with that id")

// defaultGuardTable is the table a Guard keeps its fences in unless
// WithGuardTable names another.
const defaultGuardTable = "dlock_guard"

// Guard keeps, for each named resource, the highest fence seen and a digest
// of the token that presented it, one row per resource in a guard table.
// Register raises a resource's fence inside the caller's transaction and
// keeps that row locked until the transaction ends, so everything the
// transaction writes is fenced, whatever it is and wherever in the database
// it lives. A Guard is safe for concurrent use.
type Guard struct {
	table string // quoted
	name  string
}

// GuardOption configures a Guard.
type GuardOption func(*Guard) error

// WithGuardTable sets the guard table ("name" or "schema.name"). The default
// is "dlock_guard", found through the search_path.
func WithGuardTable(table string) GuardOption {
	return func(g *Guard) error {
		q, err := quote(table)
		if err != nil {
			return err
		}
		g.table, g.name = q, table
		return nil
	}
}

// NewGuard returns a Guard. It sends nothing to the server; create the table
// with Migrate.
func NewGuard(opts ...GuardOption) (*Guard, error) {
	g := &Guard{table: defaultGuardTable, name: defaultGuardTable}
	for _, o := range opts {
		if o == nil {
			return nil, bridge.Invalidf("pgfence: nil option")
		}
		if err := o(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// MigrateSQL returns the statement that creates the guard table, for a
// migration tool. Fences are numeric(20,0): every uint64, compared
// exactly. Run from several sessions at once it can fail with a unique
// violation (SQLSTATE 23505); Migrate serializes itself and does not.
func (g *Guard) MigrateSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + g.table + ` (
	resource text PRIMARY KEY,
	fence    numeric(20,0) NOT NULL CHECK (fence > 0),
	holder   text NOT NULL
)`
}

// Migrate creates the guard table if it does not exist. It is safe to run
// from several processes at once, as replicas that start together do:
// each holds a transaction-level advisory lock while it creates (inside
// db's transaction, if db is one, until it ends).
func (g *Guard) Migrate(ctx context.Context, db Querier) error {
	if err := check(ctx, db); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, pgmigrate.Serialized(g.MigrateSQL())); err != nil {
		return fmt.Errorf("pgfence: migrate %s: %w: %w", g.name, dlock.ErrUnavailable, err)
	}
	return nil
}

// Register raises resource's highest fence to f, claiming it for token, if
// f is greater than the highest fence seen, or equal to it and token is the
// holder that set it. Call it inside the transaction that reads and writes
// what the lock protects, before the first read: the guard row stays locked
// until that transaction ends, so a stale holder's transaction waits and is
// then refused, and a stale write cannot slip in between this holder's read
// and its write.
//
// It returns an error matching fence.ErrStale (a *fence.StaleError) when f
// is stale; the caller must then roll back. It returns dlock.ErrInvalid for
// fence 0, an empty token or resource, and dlock.ErrUnavailable for
// database errors (also when the guard table is missing).
func (g *Guard) Register(ctx context.Context, q Querier, resource string, f uint64, token string) error {
	if err := check(ctx, q); err != nil {
		return err
	}
	if err := fence.Validate(resource, f, token); err != nil {
		return err
	}
	h := holder(token)
	var ok bool
	err := q.QueryRow(ctx, `INSERT INTO `+g.table+` AS g (resource, fence, holder) VALUES ($1, $2::numeric, $3)
		ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, holder = EXCLUDED.holder
		WHERE g.fence < EXCLUDED.fence OR (g.fence = EXCLUDED.fence AND g.holder = EXCLUDED.holder)
		RETURNING true`, resource, strconv.FormatUint(f, 10), h).Scan(&ok)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return dbErr("register", resource, err)
	}
	// Refused. ON CONFLICT locked the row anyway, so this reads what
	// refused us.
	var highest, setter string
	if err := q.QueryRow(ctx, `SELECT fence::text, holder FROM `+g.table+` WHERE resource = $1`, resource).Scan(&highest, &setter); err != nil {
		return dbErr("register", resource, err)
	}
	return stale("register", resource, f, highest, setter == h)
}

// Highest returns resource's highest fence, 0 for a resource never
// registered. It changes and locks nothing.
func (g *Guard) Highest(ctx context.Context, q Querier, resource string) (uint64, error) {
	if err := check(ctx, q); err != nil {
		return 0, err
	}
	var s string
	err := q.QueryRow(ctx, `SELECT COALESCE((SELECT fence::text FROM `+g.table+` WHERE resource = $1), '0')`, resource).Scan(&s)
	if err != nil {
		return 0, dbErr("highest", resource, err)
	}
	f, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, dbErr("highest", resource, fmt.Errorf("malformed fence %q in the guard: %w", s, err))
	}
	return f, nil
}

// Table fences writes to the rows of a table of yours: each row carries
// its own highest fence and holder digest, in two columns you add (by
// default "fence" of type numeric(20,0) or bigint, and "fence_holder"
// text, both NULL for a row never fenced). Update is a conditional UPDATE:
//
//	UPDATE t SET ..., fence = $f, fence_holder = $h
//	WHERE id = $id AND (fence IS NULL OR fence < $f OR (fence = $f AND fence_holder = $h))
//
// so a stale holder's late write changes nothing. A Table is a description
// of a table, safe for concurrent use.
type Table struct {
	table, id, fence, holder string // quoted
	name                     string
}

// TableOption configures a Table.
type TableOption func(*Table) error

// WithColumns names the fence and holder columns. The defaults are "fence"
// and "fence_holder".
func WithColumns(fenceColumn, holderColumn string) TableOption {
	return func(t *Table) error {
		f, err := quoteColumn(fenceColumn)
		if err != nil {
			return err
		}
		h, err := quoteColumn(holderColumn)
		if err != nil {
			return err
		}
		t.fence, t.holder = f, h
		return nil
	}
}

// NewTable returns a fenced view of table ("name" or "schema.name") whose
// rows are identified by the unique column idColumn.
func NewTable(table, idColumn string, opts ...TableOption) (*Table, error) {
	tq, err := quote(table)
	if err != nil {
		return nil, err
	}
	idq, err := quoteColumn(idColumn)
	if err != nil {
		return nil, err
	}
	t := &Table{table: tq, id: idq, fence: `"fence"`, holder: `"fence_holder"`, name: table}
	for _, o := range opts {
		if o == nil {
			return nil, bridge.Invalidf("pgfence: nil option")
		}
		if err := o(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Update sets the columns in set (column name → value) on the row id, and
// raises its fence to f for token, if f is greater than the row's fence or
// equal to it and token is the holder that set it. It returns an error
// matching fence.ErrStale (a *fence.StaleError) when f is stale, and
// nothing changed; ErrNoRow when no row has that id; dlock.ErrInvalid for
// bad arguments; dlock.ErrUnavailable for database errors.
//
// For read-modify-write, call Register (or Update) in the transaction
// before reading the row: the raised fence refuses a stale write that would
// otherwise land between the read and the write.
func (t *Table) Update(ctx context.Context, q Querier, id any, f uint64, token string, set map[string]any) error {
	if err := check(ctx, q); err != nil {
		return err
	}
	resource := fmt.Sprintf("%s[%v]", t.name, id)
	if err := fence.Validate(resource, f, token); err != nil {
		return err
	}
	h := holder(token)
	args := []any{strconv.FormatUint(f, 10), h, id}
	assign := []string{t.fence + " = $1::numeric", t.holder + " = $2"}
	for _, col := range slices.Sorted(maps.Keys(set)) {
		cq, err := quoteColumn(col)
		if err != nil {
			return err
		}
		if cq == t.fence || cq == t.holder || cq == t.id {
			return bridge.Invalidf("pgfence: update %s: column %q is managed by the guard", resource, col)
		}
		args = append(args, set[col])
		assign = append(assign, cq+" = $"+strconv.Itoa(len(args)))
	}
	tag, err := q.Exec(ctx, `UPDATE `+t.table+` SET `+strings.Join(assign, ", ")+
		` WHERE `+t.id+` = $3 AND (`+t.fence+` IS NULL OR `+t.fence+` < $1::numeric OR (`+t.fence+` = $1::numeric AND `+t.holder+` = $2))`, args...)
	if err != nil {
		return dbErr("update", resource, err)
	}
	switch n := tag.RowsAffected(); {
	case n == 1:
		return nil
	case n > 1:
		return fmt.Errorf("pgfence: update %s: %w: %d rows have that id; the id column must be unique", resource, dlock.ErrInvalid, n)
	}
	var highest, setter *string
	err = q.QueryRow(ctx, `SELECT `+t.fence+`::text, `+t.holder+` FROM `+t.table+` WHERE `+t.id+` = $1`, id).Scan(&highest, &setter)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgfence: update %s: %w", resource, ErrNoRow)
	}
	if err != nil {
		return dbErr("update", resource, err)
	}
	if highest == nil {
		// Refused, yet unfenced: the row changed between the statements
		// (another transaction cleared it). Report what we know.
		return dbErr("update", resource, errors.New("row was refused but carries no fence"))
	}
	return stale("write", resource, f, *highest, setter != nil && *setter == h)
}

// Register raises the row's fence to f for token without changing anything
// else: Update with no columns. Called inside a transaction before the row
// is read, it also locks the row until the transaction ends.
func (t *Table) Register(ctx context.Context, q Querier, id any, f uint64, token string) error {
	err := t.Update(ctx, q, id, f, token, nil)
	var se *fence.StaleError
	if errors.As(err, &se) {
		se.Op = "register"
	}
	return err
}

func check(ctx context.Context, q Querier) error {
	if ctx == nil {
		return bridge.Invalidf("pgfence: nil context")
	}
	if isNil(q) {
		return bridge.Invalidf("pgfence: nil database handle")
	}
	return nil
}

// isNil reports whether q is nil, a typed nil pointer, or SQL of one.
func isNil(q any) bool {
	if s, ok := q.(sqlQuerier); ok {
		q = s.db
	}
	return nodeerr.IsNil(q)
}

func stale(op, resource string, f uint64, highest string, sameHolder bool) error {
	hi, err := strconv.ParseUint(highest, 10, 64)
	if err != nil {
		return dbErr(op, resource, fmt.Errorf("malformed fence %q in the guard: %w", highest, err))
	}
	return &fence.StaleError{Op: op, Resource: resource, Fence: f, Highest: hi, Tie: f == hi && !sameHolder}
}

func dbErr(op, resource string, err error) error {
	return fmt.Errorf("pgfence: %s %q: %w: %w", op, resource, dlock.ErrUnavailable, err)
}

// holder is what the guard stores instead of the token: the token proves
// ownership of the lock, and the guard's rows may be readable by more
// people than the lock's. Equality is all the tie rule needs. It is the
// same digest as package redisfence's.
func holder(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:16])
}

func quote(table string) (string, error) {
	parts := strings.Split(table, ".")
	if table == "" || len(parts) > 2 || strings.ContainsRune(table, 0) || slices.Contains(parts, "") {
		return "", bridge.Invalidf("pgfence: table %q: want name or schema.name", table)
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

func quoteColumn(col string) (string, error) {
	if col == "" || strings.ContainsRune(col, 0) {
		return "", bridge.Invalidf("pgfence: column name %q", col)
	}
	return pgx.Identifier{col}.Sanitize(), nil
}
