package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/pgqueue"
)

var sentinels = []error{dlock.ErrNotAcquired, dlock.ErrNotHeld, dlock.ErrLockLost, dlock.ErrUnavailable, dlock.ErrMisconfigured, dlock.ErrInvalid}

// wantSentinel fails unless err matches want and none of dlock's other
// sentinels, and its message is one line with at most one "dlock:". Errors
// that went through a dlock.Lock carry the handle's own "dlock: op key:"
// in front: check their grant's error (see recordGrant).
func wantSentinel(t *testing.T, err, want error) {
	t.Helper()
	wantOnly(t, err, want)
	if msg := err.Error(); strings.Count(msg, "dlock:") > 1 {
		t.Fatalf("error message %q: want at most one \"dlock:\"", msg)
	}
}

// wantOnly fails unless err matches want and none of dlock's other
// sentinels, and its message is one line.
func wantOnly(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one matching %v", want)
	}
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Fatalf("error %q: errors.Is(%v) = %v; want it to match %v and no other sentinel", err, s, got, want)
		}
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") {
		t.Fatalf("error message %q: want one line", msg)
	}
}

// recordedGrant is a pglock grant inside a dlock.Lock built by the test,
// remembering the grant's last error as the grant returned it.
type recordedGrant struct {
	driver.Grant
	err error
}

func (r *recordedGrant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	until, err := r.Grant.Extend(ctx, ttl)
	r.err = err
	return until, err
}

func (r *recordedGrant) Release(ctx context.Context) error {
	r.err = r.Grant.Release(ctx)
	return r.err
}

// recordGrant takes the lock on key with l, as TryAcquire would, and
// returns the handle and its recorded grant.
func recordGrant(t *testing.T, l *pglock.Locker, key string, ttl time.Duration) (*dlock.Lock, *recordedGrant) {
	t.Helper()
	g, fence, validUntil, err := l.TryAcquireGrant(testCtx(t), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	rg := &recordedGrant{Grant: g}
	lock := driver.NewLock(key, bridge.NewToken(), fence, validUntil, rg)
	t.Cleanup(func() { lock.Release(context.Background()) })
	return lock, rg
}

// Every error path of pglock matches exactly one of dlock's sentinels
// (plus ctx.Err() for a wait that ended with its context), and its message
// is one line with at most one "dlock:". Grant errors are checked as the
// grant returns them (dlock.Lock puts its own "dlock: op key:" in front).
func TestErrorSentinels(t *testing.T) {
	ctx := testCtx(t)
	pool := shared.Pool(t, 2)
	l := newLocker(t, 3)
	held := uniqueKey(t)
	lockcheck.MustAcquire(t, l, held, 10*time.Second)

	// A schema without the fence sequence, a read-only session, a server
	// that is not there.
	const empty = "errors_no_fence"
	if err := shared.Exec(ctx, "CREATE SCHEMA "+empty); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Exec(context.Background(), "DROP SCHEMA "+empty+" CASCADE") })
	poolWith := func(edit func(*pgxpool.Config)) *pgxpool.Pool {
		cfg := shared.PoolConfig(2)
		edit(cfg)
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	lockerOn := func(p *pgxpool.Pool, opts ...pglock.Option) *pglock.Locker {
		lk, err := pglock.New(p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lk.Close() })
		return lk
	}
	unmigrated := poolWith(func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = empty })
	readOnly := poolWith(func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on" })
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The default sslmode (prefer) makes pgx try TLS, then plain: one
	// error per line.
	goneCfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=5", port))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := pgxpool.NewWithConfig(ctx, goneCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gone.Close)
	full := lockerOn(shared.Pool(t, 1))
	lockcheck.MustAcquire(t, full, uniqueKey(t), 10*time.Second)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancelExpired := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancelExpired()
	keyFuncErr := lockerOn(pool, pglock.WithKeyFunc(func(string) (pglock.Key, error) {
		return pglock.Key{}, errors.New("two lines:\nnot a tenant key")
	}))
	zeroKey := lockerOn(pool, pglock.WithKeyFunc(func(string) (pglock.Key, error) { return pglock.Key{}, nil }))
	leased := lockerOn(pool, pglock.WithSessionLease(time.Hour))
	queue, err := pgqueue.NewQueue("errors_no_such_table")
	if err != nil {
		t.Fatal(err)
	}
	// grantOf takes a fresh lock and returns its grant.
	grantOf := func(t *testing.T) driver.Grant {
		g, _, _, err := l.TryAcquireGrant(ctx, uniqueKey(t), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Release(context.Background()) })
		return g
	}
	terminated := func(t *testing.T) driver.Grant {
		key := uniqueKey(t)
		g, _, _, err := l.TryAcquireGrant(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		terminate(t, pglock.HashKey(key))
		return g
	}
	txOn := func(t *testing.T, p *pgxpool.Pool) pgx.Tx { return begin(t, p) }
	acquire := func(lk *pglock.Locker, c context.Context, key string, ttl time.Duration) error {
		_, err := lk.TryAcquire(c, key, ttl)
		return err
	}

	for _, tc := range []struct {
		name string
		want error
		also error // a context error the error matches too
		run  func(t *testing.T) error
	}{
		{"New nil pool", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := pglock.New(nil); return err }},
		{"New nil option", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := pglock.New(pool, nil); return err }},
		{"nil key func", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := pglock.New(pool, pglock.WithKeyFunc(nil)); return err }},
		{"negative lease", dlock.ErrInvalid, nil, func(*testing.T) error {
			_, err := pglock.New(pool, pglock.WithSessionLease(-time.Second))
			return err
		}},
		{"holder service not ASCII", dlock.ErrInvalid, nil, func(*testing.T) error {
			_, err := pglock.New(pool, pglock.WithHolderInfo("dépôt"))
			return err
		}},
		{"nil context", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(l, nil, "k", time.Second) }},
		{"empty key", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(l, ctx, "", time.Second) }},
		{"zero ttl", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(l, ctx, "k", 0) }},
		{"ttl above MaxTTL", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(l, ctx, "k", bridge.MaxTTL+1) }},
		{"lease above idle_session_timeout", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(leased, ctx, "k", 25*24*time.Hour) }},
		{"key func error", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(keyFuncErr, ctx, "k", time.Second) }},
		{"key func zero Key", dlock.ErrInvalid, nil, func(*testing.T) error { return acquire(zeroKey, ctx, "k", time.Second) }},
		{"zero Key", dlock.ErrInvalid, nil, func(*testing.T) error {
			_, err := l.ForKey(pglock.Key{}).TryAcquire(ctx, pglock.Key{}.String(), time.Second)
			return err
		}},
		{"busy", dlock.ErrNotAcquired, nil, func(*testing.T) error { return acquire(l, ctx, held, time.Second) }},
		{"cancelled", dlock.ErrNotAcquired, context.Canceled, func(*testing.T) error { return acquire(l, cancelled, uniqueKey(t), time.Second) }},
		{"pool exhausted", dlock.ErrUnavailable, nil, func(*testing.T) error { return acquire(full, ctx, uniqueKey(t), time.Second) }},
		{"server gone", dlock.ErrUnavailable, nil, func(*testing.T) error { return acquire(lockerOn(gone), ctx, "k", time.Second) }},
		{"not migrated", dlock.ErrMisconfigured, nil, func(*testing.T) error { return acquire(lockerOn(unmigrated), ctx, "k", time.Second) }},
		{"read-only", dlock.ErrMisconfigured, nil, func(*testing.T) error { return acquire(lockerOn(readOnly), ctx, "k", time.Second) }},

		{"grant Extend bad ttl", dlock.ErrInvalid, nil, func(t *testing.T) error { _, err := grantOf(t).Extend(ctx, -1); return err }},
		{"grant Extend lease too long", dlock.ErrInvalid, nil, func(t *testing.T) error {
			g, _, _, err := leased.TryAcquireGrant(ctx, uniqueKey(t), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Release(ctx)
			_, err = g.Extend(ctx, 25*24*time.Hour)
			return err
		}},
		{"grant Extend past its deadline", dlock.ErrUnavailable, nil, func(t *testing.T) error { _, err := grantOf(t).Extend(expired, time.Second); return err }},
		{"grant Extend, session terminated", dlock.ErrLockLost, nil, func(t *testing.T) error { _, err := terminated(t).Extend(ctx, time.Second); return err }},
		{"grant Extend again, session terminated", dlock.ErrLockLost, nil, func(t *testing.T) error {
			g := terminated(t)
			g.Extend(ctx, time.Second)
			_, err := g.Extend(ctx, time.Second)
			return err
		}},
		{"grant Release, session terminated", dlock.ErrNotHeld, nil, func(t *testing.T) error { return terminated(t).Release(ctx) }},
		{"grant Release twice", dlock.ErrNotHeld, nil, func(t *testing.T) error {
			g := grantOf(t)
			if err := g.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return g.Release(ctx)
		}},
		{"grant Extend after Release", dlock.ErrNotHeld, nil, func(t *testing.T) error {
			g := grantOf(t)
			if err := g.Release(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := g.Extend(ctx, time.Second)
			return err
		}},

		{"TryLockTx nil tx", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := pglock.TryLockTx(ctx, nil, pglock.HashKey("k")); return err }},
		{"TryLockTx zero Key", dlock.ErrInvalid, nil, func(t *testing.T) error { _, err := pglock.TryLockTx(ctx, txOn(t, pool), pglock.Key{}); return err }},
		{"TryLockTx busy", dlock.ErrNotAcquired, nil, func(t *testing.T) error {
			_, err := pglock.TryLockTx(ctx, txOn(t, pool), pglock.HashKey(held))
			return err
		}},
		{"LockTx lock_timeout", dlock.ErrNotAcquired, nil, func(t *testing.T) error {
			tx := txOn(t, pool)
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10ms'"); err != nil {
				t.Fatal(err)
			}
			_, err := pglock.LockTx(ctx, tx, pglock.HashKey(held))
			return err
		}},
		{"LockTx deadline", dlock.ErrNotAcquired, context.DeadlineExceeded, func(t *testing.T) error {
			c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := pglock.LockTx(c, txOn(t, pool), pglock.HashKey(held))
			return err
		}},
		{"LockTx not migrated", dlock.ErrMisconfigured, nil, func(t *testing.T) error {
			_, err := pglock.LockTx(ctx, txOn(t, unmigrated), pglock.HashKey("k"))
			return err
		}},

		{"Migrate nil", dlock.ErrInvalid, nil, func(*testing.T) error { return pglock.Migrate(ctx, nil) }},
		{"Migrate server gone", dlock.ErrUnavailable, nil, func(*testing.T) error { return pglock.Migrate(ctx, gone) }},
		{"NewQueue bad name", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := pgqueue.NewQueue("a.b.c"); return err }},
		{"NewQueue NUL", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := pgqueue.NewQueue("jobs\x00"); return err }},
		{"Claim batch 0", dlock.ErrInvalid, nil, func(t *testing.T) error { _, err := queue.Claim(ctx, txOn(t, pool), 0); return err }},
		{"Claim missing table", dlock.ErrUnavailable, nil, func(t *testing.T) error { _, err := queue.Claim(ctx, txOn(t, pool), 1); return err }},
		{"Work nil fn", dlock.ErrInvalid, nil, func(*testing.T) error { _, err := queue.Work(ctx, pool, 1, nil); return err }},
		{"Queue.Migrate server gone", dlock.ErrUnavailable, nil, func(*testing.T) error { return queue.Migrate(ctx, gone) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t)
			t.Log(err)
			wantSentinel(t, err, tc.want)
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Fatalf("error %q does not match %v", err, tc.also)
			}
		})
	}
}

// A server that refuses for a reason retrying cannot change makes Do fail
// at once with dlock.ErrMisconfigured and the server's own reason: a wrong
// password, a role without the right to draw fences, a database without
// the fence sequence, a read-only session.
func TestMisconfigured(t *testing.T) {
	ctx := testCtx(t)
	lockerWith := func(srv *testsrv.Postgres, edit func(*pgxpool.Config)) *pglock.Locker {
		cfg := srv.PoolConfig(2)
		edit(cfg)
		l, err := pglock.New(poolWith(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	// A cluster of its own whose hba wants app's password.
	srv := testsrv.StartPostgres(t)
	if err := pglock.Migrate(ctx, srv.Pool(t, 1)); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"CREATE ROLE app LOGIN PASSWORD 'secret'",
		"GRANT USAGE ON SEQUENCE " + pglock.FenceSequence + " TO app",
		`COPY (VALUES ('local all all trust'), ('host all app 127.0.0.1/32 scram-sha-256'), ('host all all 127.0.0.1/32 trust'))
			TO '` + srv.Dir + `/data/pg_hba.conf'`,
		"SELECT pg_reload_conf()",
	} {
		if err := srv.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	as := func(user, password string) func(*pgxpool.Config) {
		return func(c *pgxpool.Config) { c.ConnConfig.User, c.ConnConfig.Password = user, password }
	}
	lockcheck.WantRefused(t, lockerWith(srv, as("app", "wrong")), uniqueKey(t), "password authentication failed")
	lockcheck.MustAcquire(t, lockerWith(srv, as("app", "secret")), uniqueKey(t), time.Minute) // the setup is right

	role := fmt.Sprintf("nofence_%d", time.Now().UnixNano())
	if err := shared.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Exec(context.Background(), "DROP ROLE "+role) })
	lockcheck.WantRefused(t, lockerWith(shared, as(role, "")), uniqueKey(t), "permission denied for sequence")

	const empty = "misconfigured_no_fence"
	if err := shared.Exec(ctx, "CREATE SCHEMA "+empty); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Exec(context.Background(), "DROP SCHEMA "+empty+" CASCADE") })
	unmigrated := lockerWith(shared, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = empty })
	lockcheck.WantRefused(t, unmigrated, uniqueKey(t), "pglock.Migrate")
	readOnly := lockerWith(shared, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on" })
	lockcheck.WantRefused(t, readOnly, uniqueKey(t), "read-only")

	// Migrate by a role that may not create the sequence.
	if err := shared.Exec(ctx, "GRANT USAGE ON SCHEMA "+empty+" TO "+role); err != nil {
		t.Fatal(err)
	}
	cfg := shared.PoolConfig(1)
	cfg.ConnConfig.User, cfg.ConnConfig.RuntimeParams["search_path"] = role, empty
	err := pglock.Migrate(ctx, poolWith(t, cfg))
	wantSentinel(t, err, dlock.ErrMisconfigured)
	if !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Migrate without CREATE rights: %q, want the server's reason", err)
	}
}
