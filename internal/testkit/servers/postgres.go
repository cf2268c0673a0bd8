package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresBinDir is where Debian's PostgreSQL 15 server binaries live. Other
// versions under /usr/lib/postgresql/*/bin are used when it is missing.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

const postgresInstallHint = "PostgreSQL server binaries (initdb, postgres) not found under /usr/lib/postgresql/*/bin; install them with: apt-get install -y postgresql (or run `make test`, which does)"

// Postgres is a throwaway PostgreSQL cluster: initdb into a temporary
// directory, one postmaster on a free loopback port, trust authentication
// for the superuser "postgres". Its methods are safe for concurrent use.
type Postgres struct {
	Port int
	Dir  string // holds data/ and postgres.log

	bin        string
	settings   []string // -c name=value pairs
	cred       *syscall.Credential
	noTemplate bool

	process
}

// PostgresOption changes a server setting, e.g.
// PostgresSetting("max_locks_per_transaction", "10").
type PostgresOption func(*Postgres)

// PostgresSetting passes -c name=value to the postmaster; it overrides the
// harness's defaults.
func PostgresSetting(name, value string) PostgresOption {
	return func(p *Postgres) { p.settings = append(p.settings, name+"="+value) }
}

// PostgresNoTemplate makes NewPostgres run initdb for the cluster instead
// of copying a template cluster, which it would make once in the temporary
// directory and keep there: for a program that leaves nothing behind
// (dlock demo). initdb takes a few seconds.
func PostgresNoTemplate() PostgresOption { return func(p *Postgres) { p.noTemplate = true } }

// defaultSettings keep a throwaway cluster small and fast, and make the server
// notice a vanished client (a silent partition) within a few seconds.
var defaultSettings = []string{
	"listen_addresses=127.0.0.1",
	"unix_socket_directories=", // TCP only: no socket in /var/run to own
	"fsync=off",
	"synchronous_commit=off",
	"full_page_writes=off",
	"max_connections=150",
	"shared_buffers=16MB",
	"tcp_keepalives_idle=2",
	"tcp_keepalives_interval=1",
	"tcp_keepalives_count=2",
	"deadlock_timeout=100ms",
	"log_min_messages=warning",
	"log_min_error_statement=panic", // expected errors (busy, deadlock) would flood the log
	"logging_collector=off",
}

// PostgresBin returns the directory holding initdb and postgres, or an error
// saying how to install them.
func PostgresBin() (string, error) {
	ok := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return false
			}
		}
		return true
	}
	if ok(PostgresBinDir) {
		return PostgresBinDir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if ok(d) {
			return d, nil
		}
	}
	return "", errors.New(postgresInstallHint)
}

// NewPostgres creates a cluster in dir (which must exist and be empty or
// new) and starts it on a free loopback port. The caller must call Stop.
// As root it runs initdb and postgres as the user "postgres", since
// PostgreSQL refuses to run as root; dir is handed to that user.
func NewPostgres(dir string, opts ...PostgresOption) (*Postgres, error) {
	bin, err := PostgresBin()
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: dir, bin: bin, settings: append([]string(nil), defaultSettings...)}
	for _, o := range opts {
		o(p)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			return nil, err
		}
		p.cred = cred
		if err := handOver(dir, cred); err != nil {
			return nil, err
		}
	}
	if err := p.initdb(); err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // a freed port can be taken before the server binds it
		if p.Port, err = FreePort(); err != nil {
			return nil, err
		}
		if lastErr = p.start(); lastErr == nil {
			return p, nil
		}
	}
	return nil, lastErr
}

// NewStandby creates a hot standby of p in dir (pg_basebackup with
// streaming replication) and starts it on a free loopback port. Its
// pg_is_in_recovery() is true and it refuses writes. The caller must call
// Stop.
func (p *Postgres) NewStandby(dir string) (*Postgres, error) {
	s := &Postgres{Dir: dir, bin: p.bin, cred: p.cred, settings: append([]string(nil), p.settings...)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := handOver(dir, s.cred); err != nil {
			return nil, err
		}
	}
	cmd := s.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres",
		"-D", s.dataDir(), "-R", "-X", "stream", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup from port %d: %v\n%s", p.Port, err, out)
	}
	var err, lastErr error
	for range 5 {
		if s.Port, err = FreePort(); err != nil {
			return nil, err
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL will not: no user %q to run it as (%v); %s", "postgres", err, postgresInstallHint)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// handOver gives dir to the postgres user and lets it traverse dir's
// parents (temporary directories are created 0700).
func handOver(dir string, cred *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.Chown(abs, int(cred.Uid), int(cred.Gid)); err != nil {
		return err
	}
	for d := filepath.Dir(abs); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Postgres) dataDir() string { return filepath.Join(p.Dir, "data") }
func (p *Postgres) logFile() string { return filepath.Join(p.Dir, "postgres.log") }

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	// Own process group; killed with the process that started it (Pdeathsig is set
	// after the credential switch, so it survives it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	return cmd
}

// initdb creates the cluster's data directory: a copy of a template
// cluster made once per machine (initdb takes seconds on a busy machine,
// a copy a fraction of that), or a fresh initdb when no template can be
// made.
func (p *Postgres) initdb() error {
	if p.noTemplate {
		return p.initdbInto(p.dataDir())
	}
	if tpl, err := p.template(); err == nil {
		if err := exec.Command("cp", "-a", tpl, p.dataDir()).Run(); err == nil {
			return nil
		}
		os.RemoveAll(p.dataDir()) // and fall back to initdb
	}
	return p.initdbInto(p.dataDir())
}

func (p *Postgres) initdbInto(dir string) error {
	cmd := p.command("initdb", "-D", dir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb in %s: %v\n%s", dir, err, out)
	}
	return nil
}

// template returns a pristine data directory for this PostgreSQL version
// and user, creating it on first use. Concurrent test binaries race to
// create it; the loser's copy is discarded (a rename is atomic).
func (p *Postgres) template() (string, error) {
	version := filepath.Base(filepath.Dir(p.bin)) // "15" in /usr/lib/postgresql/15/bin
	root := filepath.Join(os.TempDir(), fmt.Sprintf("dlock-testsrv-pg%s-uid%d", version, os.Geteuid()))
	data := filepath.Join(root, "data")
	if _, err := os.Stat(filepath.Join(root, "complete")); err == nil {
		return data, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "dlock-testsrv-pgtpl")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // after a successful rename, nothing is left here
	if p.cred != nil {
		if err := handOver(tmp, p.cred); err != nil {
			return "", err
		}
	}
	if err := p.initdbInto(filepath.Join(tmp, "data")); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, root); err != nil {
		// Another process made it first; use theirs if it is complete.
		if _, serr := os.Stat(filepath.Join(root, "complete")); serr != nil {
			return "", err
		}
	}
	return data, nil
}

func (p *Postgres) start() error {
	args := []string{"-D", p.dataDir(), "-p", strconv.Itoa(p.Port)}
	for _, s := range p.settings {
		args = append(args, "-c", s)
	}
	cmd := p.command("postgres", args...)
	logf, err := os.OpenFile(p.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	logf.Close() // the child has its own descriptor
	exited := p.track(cmd)

	switch waitReady(exited, 30*time.Second, 20*time.Millisecond, p.ping) {
	case errExited:
		return fmt.Errorf("postgres on port %d exited at start: %s", p.Port, p.logTail())
	case errNotReady:
		p.Kill()
		return fmt.Errorf("postgres on port %d did not accept connections within 30s: %s", p.Port, p.logTail())
	}
	return nil
}

func (p *Postgres) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

func (p *Postgres) logTail() string {
	b, _ := os.ReadFile(p.logFile())
	s := strings.TrimSpace(string(b))
	if len(s) > 1000 {
		s = s[len(s)-1000:]
	}
	return s
}

// DSN returns a connection string for the superuser on database postgres.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", p.Port)
}

// PoolConfig returns a pgxpool configuration for this server with at most
// maxConns connections (0: pgxpool's default).
func (p *Postgres) PoolConfig(maxConns int32) *pgxpool.Config {
	cfg, err := pgxpool.ParseConfig(p.DSN())
	if err != nil {
		panic(err) // DSN is built above; it always parses
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	return cfg
}

// Exec runs one statement on a fresh connection (not from any pool), so
// it works while pools are exhausted or their connections are killed.
func (p *Postgres) Exec(ctx context.Context, sql string, args ...any) error {
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql, args...)
	return err
}

// Terminate ends the backend with the given pid (pg_terminate_backend) and
// waits until it has exited, so its session locks are released when
// Terminate returns; its client learns on its next statement. (Without the
// wait the backend exits a moment later, and a test's next attempt could
// still find the lock held: seen once under load.)
func (p *Postgres) Terminate(ctx context.Context, pid uint32) error {
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	const waitMS = 10000
	var gone bool
	if err := c.QueryRow(ctx, "SELECT pg_terminate_backend($1::int4, $2)", int32(pid), waitMS).Scan(&gone); err != nil {
		return err
	}
	if !gone {
		return fmt.Errorf("pg_terminate_backend(%d): no such backend, or it did not exit within %dms", pid, waitMS)
	}
	return nil
}

// AdvisoryLock is one row of pg_locks with locktype 'advisory'.
type AdvisoryLock struct {
	PID      uint32
	ClassID  uint32 // high half of a bigint key, or the first int4 key
	ObjID    uint32 // low half of a bigint key, or the second int4 key
	ObjSubID int16  // 1: bigint key; 2: two int4 keys
	Mode     string // ExclusiveLock or ShareLock
	Granted  bool
}

// Int64 returns the bigint key of a lock taken with the one-argument form.
func (a AdvisoryLock) Int64() int64 { return int64(uint64(a.ClassID)<<32 | uint64(a.ObjID)) }

// AdvisoryLocks lists the advisory locks held or awaited in the cluster's
// postgres database, as pg_locks shows them.
func (p *Postgres) AdvisoryLocks(ctx context.Context) ([]AdvisoryLock, error) {
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, `SELECT pid, classid::int8, objid::int8, objsubid, mode, granted
		FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid() ORDER BY pid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AdvisoryLock, error) {
		var a AdvisoryLock
		var pid int32
		var class, obj int64
		err := r.Scan(&pid, &class, &obj, &a.ObjSubID, &a.Mode, &a.Granted)
		a.PID, a.ClassID, a.ObjID = uint32(pid), uint32(class), uint32(obj)
		return a, err
	})
}

// WaitNoAdvisoryLocks waits until pg_locks shows no advisory lock (a closed
// client's backend exits a moment after its socket closes) and returns the
// ones still there when ctx ends.
func (p *Postgres) WaitNoAdvisoryLocks(ctx context.Context) ([]AdvisoryLock, error) {
	for {
		locks, err := p.AdvisoryLocks(ctx)
		if err == nil && len(locks) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return locks, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to the postmaster and waits for it. Its backends exit
// on their own when they notice; the cluster needs crash recovery on
// Restart.
func (p *Postgres) Kill() { p.signal(syscall.SIGKILL, true) }

// Restart stops the server immediately (every session ends, every advisory
// lock is released) and starts it again on the same port.
func (p *Postgres) Restart() error {
	p.Stop()
	var err error
	for range 50 { // the port may linger briefly
		if err = p.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Stop shuts the server down in immediate mode (SIGQUIT, like pg_ctl stop
// -m immediate), falling back to SIGKILL, and waits for the postmaster to
// exit. It is safe to call twice.
func (p *Postgres) Stop() {
	exited := p.exitedChan()
	if exited == nil {
		return
	}
	p.signal(syscall.SIGCONT, false)
	p.signal(syscall.SIGQUIT, false)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}
