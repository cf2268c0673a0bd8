package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
)

// backendFlags are the flags every command that talks to a backend takes.
type backendFlags struct {
	redis    []string
	postgres string
	etcd     []string
	ttl      time.Duration // the command's --ttl, if it has one (sizes Redlock's node timeout)
	// createTable lets `run` create PostgreSQL's fence sequence when it is
	// missing; without it dlock never changes a database's schema. (The
	// flag's name, --create-fence-table, predates the sequence.)
	createTable bool
	// holder makes `run` publish who holds the lock, for dlock inspect
	// (the backends' WithHolderInfo; --no-holder turns it off), and name
	// labels that record (--name: the service the library's option takes).
	holder bool
	name   string
}

func addBackendFlags(cmd *cobra.Command, f *backendFlags) {
	cmd.Flags().StringArrayVar(&f.redis, "redis", nil,
		"Redis `URL` (host:port, redis://, rediss:// for TLS, unix://); repeat it for Redlock\nacross independent nodes (default: $DLOCK_REDIS, comma-separated)")
	cmd.Flags().StringVar(&f.postgres, "postgres", "",
		"PostgreSQL `DSN` for an advisory lock (default: $DLOCK_POSTGRES)")
	addEtcdFlag(cmd, f)
}

// A use says what a command needs from its backend.
type use int

const (
	useRun     use = iota // a lock held by this process: every backend
	useTokens             // a lock that outlives the process: Redis or etcd
	useInspect            // listing held locks: every backend
)

// backend is the lock service a command talks to.
type backend struct {
	kind    string // "redis", "redlock", "postgres" or "etcd"
	locker  dlock.Locker
	tokens  tokenLocker             // nil for postgres
	clients []redis.UniversalClient // nil for postgres and etcd
	nodes   []string                // addresses, for messages (never with passwords)
	closers []func()
	// leave ends what the Locker keeps on the servers for this process
	// alone (etcd: revokes its leases, and with them the keys of tries and
	// waits that gave up, which would otherwise stand in the lock's queue
	// until their lease ran out). close calls it unless keep is set: by
	// the commands whose lock outlives the process (acquire, extend).
	leave func()
	keep  bool
}

// tokenLocker is what acquire/extend/release need: operations on a lock
// known only by its token.
type tokenLocker interface {
	ReleaseToken(ctx context.Context, key, token string) error
	ExtendToken(ctx context.Context, key, token string, ttl time.Duration) error
}

func (b *backend) close() {
	if b.leave != nil && !b.keep {
		b.leave()
	}
	for _, c := range b.closers {
		c()
	}
}

// backendSpec returns the Redis URLs or the Postgres DSN to use: the flags
// if any backend flag was given, the environment otherwise. It registers
// every password with the redactor before anything can print it.
func (a *app) backendSpec(cmd *cobra.Command, f *backendFlags) (urls []string, dsn string, err error) {
	fl := cmd.Flags()
	if fl.Changed("redis") || fl.Changed("postgres") {
		urls, dsn = f.redis, f.postgres
	} else {
		for _, u := range strings.Split(a.lookupEnv("DLOCK_REDIS"), ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		dsn = strings.TrimSpace(a.lookupEnv("DLOCK_POSTGRES"))
	}
	a.redact.addDSN(dsn)
	if err := a.redisURLs(urls); err != nil {
		return nil, "", err
	}
	switch {
	case len(urls) > 0 && dsn != "":
		return nil, "", usagef("%s", chooseOne)
	case len(urls) == 0 && dsn == "":
		return nil, "", usagef("no backend: give --redis URL (Redis), --etcd URL (etcd) or --postgres DSN (PostgreSQL), or set DLOCK_REDIS, DLOCK_ETCD or DLOCK_POSTGRES")
	}
	return urls, dsn, nil
}

// chooseOne is the answer to flags or variables that name several backends.
const chooseOne = "choose one backend: Redis (--redis, DLOCK_REDIS), etcd (--etcd, DLOCK_ETCD) or PostgreSQL (--postgres, DLOCK_POSTGRES)"

// redisURLs makes each of urls a Redis URL, in place: an address without
// a scheme (host:port, as redis-cli and most configuration files write it)
// gets redis://, a socket's path unix://. It registers their passwords
// with the redactor, then checks that each parses.
func (a *app) redisURLs(urls []string) error {
	for i, u := range urls {
		switch {
		case strings.HasPrefix(u, "/"):
			urls[i] = "unix://" + u
		case !strings.Contains(u, "://"):
			urls[i] = "redis://" + u
		}
		a.redact.addURL(urls[i])
	}
	for i, u := range urls {
		if _, err := redis.ParseURL(u); err != nil {
			return usagef("Redis URL #%d: %v (want host:port, redis://[[user]:password@]host[:port][/db], rediss:// or unix://)", i+1, err)
		}
	}
	return nil
}

// openBackend builds the backend for a command. It sends nothing to any
// server, so an unreachable one shows up at the first operation.
func (a *app) openBackend(ctx context.Context, cmd *cobra.Command, f *backendFlags, u use) (*backend, error) {
	a.name = cmd.CommandPath() // for the backends' lines
	be, err := a.open(ctx, cmd, f, u)
	if err != nil && f.name != "" && errors.Is(err, dlock.ErrInvalid) {
		// The one option of the user's: PostgreSQL takes printable ASCII.
		return nil, usagef("--name %q: %v", f.name, err)
	}
	return be, err
}

// open is openBackend, without the word on --name.
func (a *app) open(ctx context.Context, cmd *cobra.Command, f *backendFlags, u use) (*backend, error) {
	if eps, err := a.etcdSpec(cmd, f); err != nil || len(eps) > 0 {
		if err != nil {
			return nil, err
		}
		return a.openEtcd(eps, f)
	}
	urls, dsn, err := a.backendSpec(cmd, f)
	if err != nil {
		return nil, err
	}
	if dsn != "" {
		switch u {
		case useTokens:
			return nil, usagef("%s needs Redis or etcd: a PostgreSQL advisory lock belongs to a database session and ends with the dlock process (use dlock run)", cmd.Name())
		}
		return a.openPostgres(ctx, dsn, f)
	}
	return a.openRedis(urls, f)
}

// quietLogger drops go-redis's internal log lines (dial retries and the
// like): dlock reports failures itself, in one line.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }

func (a *app) openRedis(urls []string, f *backendFlags) (*backend, error) {
	b := &backend{kind: "redis"}
	for i, u := range urls {
		opt, err := redis.ParseURL(u) // checked by redisURLs
		if err != nil {
			b.close()
			return nil, usagef("Redis URL #%d: %v", i+1, err)
		}
		// Deadlines of the caller (--wait, the lock's validity) must bound
		// every request, not only the client's own timeouts.
		opt.ContextTimeoutEnabled = true
		// The documented defaults, whatever go-redis's are: one try takes
		// at most dial_timeout + read_timeout (redislock bounds it so); the
		// write timeout follows the read timeout, as in go-redis.
		if !strings.Contains(u, "dial_timeout=") {
			opt.DialTimeout = 5 * time.Second
		}
		if !strings.Contains(u, "read_timeout=") {
			opt.ReadTimeout = 3 * time.Second
		}
		// A refused connection is not retried five times with pauses: a
		// dead server must cost one short attempt, not a second of the
		// wait or of Redlock's per-node budget.
		opt.DialerRetries = 1
		if !strings.Contains(u, "max_retries=") {
			opt.MaxRetries = 1 // one retry; the acquire script is idempotent for a token
			if len(urls) > 1 {
				opt.MaxRetries = -1 // Redlock: the quorum absorbs a failed node
			}
		}
		c := redis.NewClient(opt)
		b.clients = append(b.clients, c)
		b.nodes = append(b.nodes, opt.Addr)
		b.closers = append(b.closers, func() { c.Close() })
	}
	if len(b.clients) == 1 {
		opts := []redislock.Option{redislock.WithLogger(a.logger()), redislock.WithObserver(a.observe)}
		if f.holder {
			opts = append(opts, redislock.WithHolderInfo(f.name))
		}
		l, err := redislock.New(b.clients[0], opts...)
		if err != nil {
			b.close()
			return nil, err
		}
		// Close first: it takes a wait that was given up (Ctrl-C) out of
		// the key's waiter queue before the client closes, so the next
		// release is not reserved for, or granted to, this gone process.
		b.closers = append([]func(){func() { l.Close() }}, b.closers...)
		b.locker, b.tokens = l, l
		return b, nil
	}
	return a.openRedlock(b, f)
}

// recorder wraps a Locker to learn, after a failed wait, whether any attempt
// found the lock actually held: a wait that only ever met an unreachable or
// silent server is "unavailable" (69), not "busy" (75).
//
// It also bounds each attempt by until, when set: `dlock run` cannot give
// dlock.Do a context with a deadline (the command's context derives from
// it), and a cancellation alone does not interrupt a request to a server
// that accepted the connection but does not answer.
type recorder struct {
	dlock.Locker
	until time.Time

	mu      sync.Mutex
	sawBusy bool
}

func (r *recorder) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	if !r.until.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, r.until)
		defer cancel()
	}
	lock, err := r.Locker.TryAcquire(ctx, key, ttl)
	if err != nil && errors.Is(err, dlock.ErrNotAcquired) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		r.mu.Lock()
		r.sawBusy = true
		r.mu.Unlock()
	}
	return lock, err
}

// NotifyRelease passes the backend's wake-on-release through, so waiting
// through the recorder is as fast as without it.
func (r *recorder) NotifyRelease(ctx context.Context, key string) (<-chan struct{}, func()) {
	if n, ok := r.Locker.(driver.ReleaseNotifier); ok {
		return n.NotifyRelease(ctx, key)
	}
	return nil, func() {} // a nil channel never fires: polling only
}

func (r *recorder) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sawBusy
}

// acquireError turns a failed acquisition of key (a semaphore's with a
// limit) into an exit code and message.
func acquireError(err error, rec *recorder, key string, limit int, wait time.Duration) error {
	switch {
	case errors.Is(err, dlock.ErrInvalid):
		return &usageError{err: err}
	case errors.Is(err, pglock.ErrNotMigrated):
		return exitf(exitMisconfigured, "the database has no dlock_fence sequence (or, for --limit, no dlock_semaphore table): run once with --create-fence-table, or create them with the SQL of pglock.MigrateSQL")
	case errors.Is(err, errCreateFence):
		return exitf(backendCode(err), "%v", err)
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.ErrMisconfigured):
		return backendError(err)
	case errors.Is(err, dlock.ErrNotAcquired) && rec.busy() && limit > 0:
		if wait > 0 {
			return busyf("semaphore %q is full: its %d permits were held for all of --wait %s", key, limit, waitString(wait))
		}
		return busyf("semaphore %q is full: its %d permits are held", key, limit)
	case errors.Is(err, dlock.ErrNotAcquired) && rec.busy():
		if wait > 0 {
			return busyf("lock %q is busy: another owner held it for all of --wait %s", key, waitString(wait))
		}
		return busyf("lock %q is busy: another owner holds it", key)
	case errors.Is(err, dlock.ErrNotAcquired):
		return exitf(exitUnavailable, "backend unreachable: no answer within --wait %s", waitString(wait))
	}
	return exitf(exitFailure, "%v", err)
}

// tokenError turns an error of extend or release into an exit code.
func tokenError(err error, key string) error {
	switch {
	case errors.Is(err, dlock.ErrInvalid):
		return &usageError{err: err}
	case errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrLockLost):
		return exitf(exitLost, "lock %q is not held by this token (it expired, was released, or another owner holds it)", key)
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.ErrMisconfigured):
		return backendError(err)
	}
	return exitf(exitFailure, "%v", err)
}

// backendCode is the exit code of a backend's failure: 78 when it refused
// for a reason waiting cannot fix (dlock.ErrMisconfigured), 69 otherwise.
func backendCode(err error) int {
	if errors.Is(err, dlock.ErrMisconfigured) {
		return exitMisconfigured
	}
	return exitUnavailable
}

// backendError reports a backend that could not be reached (69) or that
// refused (78), naming the node if the error says which one failed, and the
// server's own reply when it answered with an error (with the ACL key
// patterns dlock needs, when that was NOPERM).
func backendError(err error) error {
	var qe *redlock.QuorumError
	var ne *dlock.NodeError
	var re redis.Error
	code, what, said, sentinel := exitUnavailable, "backend unreachable", "answered with an error", dlock.ErrUnavailable
	if backendCode(err) == exitMisconfigured {
		code, what, said, sentinel = exitMisconfigured, "backend refused (fix its setup)", "refused (fix its setup)", dlock.ErrMisconfigured
	}
	msg := what + ": " + err.Error()
	switch {
	case errors.As(err, &qe):
		msg = what + " (Redlock): " + strings.TrimPrefix(qe.Error(), sentinel.Error()+": ")
	case errors.As(err, &ne) && errors.As(err, &re):
		msg = fmt.Sprintf("the server %s %s: %v", ne.Node, said, re)
	case errors.As(err, &ne):
		msg = what + ": " + ne.Error()
	}
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM") {
		msg += "; besides the lock keys, dlock needs the keys ~dlock:* and the channels &dlock:wake:* " +
			"(e.g. ACL SETUSER <user> ~<lock keys> ~dlock:* &dlock:wake:* +@all)"
	}
	return exitf(code, "%s", msg)
}

// addURL registers the password of a URL (as written and decoded), and
// works on URLs that do not parse, whose error messages may quote them.
func (r *redactor) addURL(raw string) {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			r.add(p)
		}
	}
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pass, ok := strings.Cut(rest[:at], ":"); ok {
				r.add(pass)
			}
		}
	}
}

var dsnPassword = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// addDSN registers the password of a PostgreSQL DSN in URL or key=value form.
func (r *redactor) addDSN(dsn string) {
	if dsn == "" {
		return
	}
	if strings.Contains(dsn, "://") {
		r.addURL(dsn)
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(dsn, -1) {
		r.add(m[1])
		r.add(strings.Trim(m[1], "'"))
	}
}
