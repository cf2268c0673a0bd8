package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/negative"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
)

// workerConfig is what the parent sends a worker, as the first line of its
// standard input.
type workerConfig struct {
	ID      int
	Backend string
	// Lock servers, as the user gave them (redis:// URLs or a DSN), and
	// the addresses of this worker's proxies to them, in the same order.
	Locks   []string
	Proxies []string
	Oracle  string // host:port of the oracle's (and the Redis guard's) server
	Guard   string // a PostgreSQL DSN for the pgfence guard; "" for redisfence on Oracle
	Prefix  string // of the lock keys
	Keys    []string
	Limit   int // above 0: the keys are semaphores of Limit permits
	TTL     time.Duration
	Hold    time.Duration
	// DriftFactor of the Lockers (Redis backends).
	DriftFactor float64
	Seed        int64
	Control     string
	// ControlOff runs the control's schedule with its flaw switched off.
	ControlOff bool
	// Election: the worker leads (dlock.Lead) instead of taking locks,
	// or with Observer follows each key's leader (dlock.Observe).
	Election, Observer bool
}

// Keys the oracle and the guards use, beside nothing a fault touches.
const (
	seqKey      = "torture:seq"
	insidePfx   = "torture:inside:"
	registerPfx = "torture:register:"
	registerTbl = "torture_register"
)

// WorkerMain is the body of a worker process: it reads its configuration
// from the first line of stdin, takes locks until stdin is closed (then it
// finishes the section it is in), and writes one JSON Event per line to
// stdout. It returns the process's exit status. The dlock binary runs it
// in a hidden mode, tests from TestMain.
func WorkerMain(stdin io.Reader, stdout, stderr io.Writer) int {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fmt.Fprintf(stderr, "torture worker: reading the configuration: %v\n", err)
		return 2
	}
	var cfg workerConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		fmt.Fprintf(stderr, "torture worker: bad configuration: %v\n", err)
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		io.Copy(io.Discard, in) // until the parent closes our stdin
		stop()
	}()
	w, err := newWorker(cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "torture worker %d: %v\n", cfg.ID, err)
		return 2
	}
	defer w.close()
	if err := w.connect(ctx); err != nil {
		fmt.Fprintf(stderr, "torture worker %d: %v\n", cfg.ID, err)
		return 2
	}
	w.emit(Event{Ev: evReady})
	w.run(ctx)
	return 0
}

type worker struct {
	cfg     workerConfig
	rng     *rand.Rand
	locker  dlock.Locker
	lockRDB []*redis.Client // the lock servers' clients (Redis backends)
	pool    *pgxpool.Pool   // the lock server's pool (postgres)
	etcd    *clientv3.Client
	oracle  *redis.Client
	reg     register
	doOpts  []dlock.Option
	closers []func()
	writes  int

	mu  sync.Mutex
	out *bufio.Writer
	enc *json.Encoder
}

func newWorker(cfg workerConfig, stdout, stderr io.Writer) (w *worker, err error) {
	out := bufio.NewWriter(stdout)
	w = &worker{cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.ID))), out: out, enc: json.NewEncoder(out)}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	w.oracle = redis.NewClient(&redis.Options{Addr: cfg.Oracle, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	w.closers = append(w.closers, func() { w.oracle.Close() })

	switch cfg.Backend {
	case Redis, Redlock:
		for i, u := range cfg.Locks {
			opt, err := redis.ParseURL(u)
			if err != nil {
				return nil, fmt.Errorf("lock server #%d: %w", i+1, err)
			}
			if opt.TLSConfig != nil && opt.TLSConfig.ServerName == "" {
				tc := opt.TLSConfig.Clone()
				tc.ServerName, _, _ = net.SplitHostPort(opt.Addr)
				opt.TLSConfig = tc
			}
			opt.Network, opt.Addr, opt.Dialer = "tcp", cfg.Proxies[i], nil
			opt.ContextTimeoutEnabled = true
			opt.DialerRetries = 1
			opt.MaxRetries = 1
			if cfg.Backend == Redlock {
				opt.MaxRetries = -1 // the quorum absorbs a failed node
			}
			// A silent link must not hold an attempt without a deadline
			// (Acquire's) for go-redis's 3s default; but a loaded machine
			// must not time out a healthy one (at 200ms, connections
			// through the proxy timed out under a full make test).
			t := max(2*cfg.TTL, time.Second)
			opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = t, t, t
			c := redis.NewClient(opt)
			w.lockRDB = append(w.lockRDB, c)
			w.closers = append(w.closers, func() { c.Close() })
		}
		if cfg.Backend == Redis {
			l, err := redislock.New(w.lockRDB[0], redislock.WithPrefix(cfg.Prefix), redislock.WithLogger(logger),
				redislock.WithDriftFactor(cfg.DriftFactor))
			if err != nil {
				return nil, err
			}
			w.closers = append([]func(){func() { l.Close() }}, w.closers...)
			if cfg.Control == ControlNoDrift && !cfg.ControlOff {
				negative.RedislockDriftFactor(l, noDrift(cfg.TTL))
			}
			w.locker = l
		} else {
			clients := make([]redis.UniversalClient, len(w.lockRDB))
			for i, c := range w.lockRDB {
				clients[i] = c
			}
			l, err := redlock.New(clients, redlock.WithPrefix(cfg.Prefix), redlock.WithLogger(logger),
				redlock.WithDriftFactor(cfg.DriftFactor))
			if err != nil {
				return nil, err
			}
			w.closers = append([]func(){func() { l.Close() }}, w.closers...)
			switch {
			case cfg.ControlOff:
			case cfg.Control == ControlQuorum:
				negative.RedlockQuorum(l, len(clients)/2)
			case cfg.Control == ControlNoDrift:
				negative.RedlockDriftFactor(l, noDrift(cfg.TTL))
			}
			w.locker = l
		}
	case Postgres:
		pcfg, err := pgxpool.ParseConfig(cfg.Locks[0])
		if err != nil {
			return nil, fmt.Errorf("postgres DSN: %w", err)
		}
		host, port, err := net.SplitHostPort(cfg.Proxies[0])
		if err != nil {
			return nil, err
		}
		p, _ := strconv.Atoi(port)
		pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = host, uint16(p)
		pcfg.ConnConfig.Fallbacks = nil
		pcfg.ConnConfig.ConnectTimeout = max(2*cfg.TTL, time.Second)
		pcfg.MaxConns = 4 // a held lock, the release listener, and room for a connection being replaced
		pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
		if err != nil {
			return nil, err
		}
		w.closers = append(w.closers, pool.Close)
		w.pool = pool
		// The lease lets the server free a lock whose holder is paused,
		// as a Redis TTL would; without it a SIGSTOPped holder keeps it.
		l, err := pglock.New(pool, pglock.WithSessionLease(cfg.TTL/2))
		if err != nil {
			return nil, err
		}
		w.closers = append([]func(){func() { l.Close() }}, w.closers...)
		w.locker = l
	case Etcd:
		// One client over every member, each through this worker's proxy.
		var eps []string
		for _, p := range cfg.Proxies {
			eps = append(eps, "http://"+p)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop(),
			DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
		if err != nil {
			return nil, err
		}
		w.closers = append(w.closers, func() { cli.Close() })
		w.etcd = cli
		l, err := etcdlock.New(cli, etcdlock.WithPrefix(cfg.Prefix), etcdlock.WithLogger(logger),
			etcdlock.WithDriftFactor(cfg.DriftFactor))
		if err != nil {
			return nil, err
		}
		w.locker = l
	default:
		return nil, fmt.Errorf("backend %q", cfg.Backend)
	}

	if cfg.Limit > 0 {
		if cfg.Control == ControlSemCount && !cfg.ControlOff {
			w.locker = perNodeSemaphore(w.lockRDB, cfg.Prefix, cfg.Limit)
		} else {
			w.locker = dlock.Semaphore(w.locker, cfg.Limit)
		}
	}
	if w.reg, err = newRegister(cfg, w.oracle); err != nil {
		return nil, err
	}
	switch cfg.Control {
	case ControlPlainDel, ControlGTE, ControlQuorum, ControlNoDrift, ControlSemCount:
		// Waiters retry every millisecond or two: a key deleted from
		// under its holder, a split vote, a key that expires early is
		// taken at once.
		w.doOpts = append(w.doOpts, dlock.WithRetryDelay(time.Millisecond), dlock.WithRetryJitter(time.Millisecond))
	}
	if cfg.Control == ControlNoDrift {
		// The holder rides its lock to the edge of its validity: no
		// extension.
		w.doOpts = append(w.doOpts, dlock.WithMaxHold(cfg.TTL))
	}
	return w, nil
}

// connect opens a connection to every server before the worker says it is
// ready: on a loaded machine the first dials can take a good part of a
// short run. A worker started again after a kill may find a server in the
// middle of a restart fault: it tries again until the servers answer.
func (w *worker) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := w.ping(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// ping reaches every server once.
func (w *worker) ping(ctx context.Context) error {
	if err := w.oracle.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	for i, c := range w.lockRDB {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("lock server #%d: %w", i+1, err)
		}
	}
	if w.etcd != nil {
		if _, err := w.etcd.Get(ctx, "torture-ping"); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
	}
	if w.pool != nil {
		if err := w.pool.Ping(ctx); err != nil {
			return fmt.Errorf("lock server: %w", err)
		}
	}
	return nil
}

// noDrift is the drift factor that makes the drift margin (ttl × f + 2ms) zero: it
// cancels the 2ms constant.
func noDrift(ttl time.Duration) float64 { return -float64(2*time.Millisecond) / float64(ttl) }

func (w *worker) close() {
	for _, c := range w.closers {
		c()
	}
	w.mu.Lock()
	w.out.Flush()
	w.mu.Unlock()
}

func (w *worker) emit(e Event) {
	if e.T == 0 {
		e.T = now()
	}
	e.W = w.cfg.ID
	w.mu.Lock()
	defer w.mu.Unlock()
	w.enc.Encode(e)
	w.out.Flush()
}

// run takes locks until ctx ends: with Do, or in the election scenario as
// a candidate with Lead, one term at a time (a term is a critical section,
// resigned when it ends; a lost term campaigns again within Lead). Between
// terms a candidate rests half the time, up to four TTLs, and no candidate
// begins a campaign in the quiet windows (see quiet), so that at times
// nobody leads for longer than an observer may linger.
func (w *worker) run(ctx context.Context) {
	if w.cfg.Observer {
		w.observe(ctx)
		return
	}
	take, opts := dlock.Do, w.doOpts
	if w.cfg.Election {
		take, opts = dlock.Lead, append([]dlock.Option{dlock.WithIdentity(identity(w.cfg.ID))}, w.doOpts...)
	}
	for ctx.Err() == nil {
		if w.cfg.Election {
			sleepCtx(ctx, quiet(w.cfg.TTL, time.Now()))
		}
		key := w.cfg.Keys[w.rng.IntN(len(w.cfg.Keys))]
		hold := time.Duration(w.rng.Int64N(int64(w.cfg.Hold) + 1))
		w.emit(Event{Ev: evWait, Key: key})
		ran := false
		err := take(ctx, w.locker, w.name(key), w.cfg.TTL, func(ctx context.Context) error {
			ran = true
			w.section(ctx, key, hold)
			return nil
		}, opts...)
		e := Event{Ev: evDone, Key: key, Err: sentinels(err)}
		if err != nil {
			e.Msg = oneLine(err.Error())
		}
		w.emit(e)
		switch {
		case err != nil && !ran && ctx.Err() == nil && !errors.Is(err, dlock.ErrNotAcquired):
			// The backend is unreachable: do not spin on it.
			sleepCtx(ctx, time.Duration(10+w.rng.IntN(40))*time.Millisecond)
		case w.cfg.Election && w.rng.IntN(2) == 0:
			sleepCtx(ctx, time.Duration(w.rng.Int64N(int64(4*w.cfg.TTL))))
		}
	}
}

// edge is how long before its validity ends a holder of the no-drift
// control's schedule records its exit. With the drift margin the next
// grant comes 2ms (the margin's constant) + edge after that exit; without
// it, the fast clock's cut - edge before it (see controlDriftFactor).
const edge = 15 * time.Millisecond

// signalWait is how long a holder whose validity has run out waits for Do
// to cancel its context before the checker counts the loss as unsignalled.
const signalWait = 200 * time.Millisecond

// section is the critical section: enter the oracle, read the register
// through the guard (which registers the fence), hold, write the register,
// exit the oracle. It writes even when it was told its lock was lost while
// it held: that models a holder whose last check came just before the loss
// (a pause between check and act), and every such write must be refused
// by the guard if someone else has the lock by then.
func (w *worker) section(ctx context.Context, key string, hold time.Duration) {
	granted := now()
	lock := dlock.LockFromContext(ctx)
	var ended atomic.Int64
	stop := context.AfterFunc(ctx, func() { ended.Store(now()) })
	defer stop()
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	me := strconv.Itoa(w.cfg.ID) + ":" + lock.Token()
	// The register of a semaphore's permit is its slot's: fences count
	// per slot.
	reg := key
	if w.cfg.Limit > 0 {
		reg = bridge.SlotKey(key, lock.Slot())
	}

	seq, prev, err := w.enter(bg, key, me)
	w.emit(Event{T: granted, Ev: evEnter, Key: key, Tok: lock.Token(), Fence: lock.Fence(), Seq: seq, Prev: prev,
		Valid: lock.ValidUntil().UnixNano(), Msg: errMsg(err)})

	t0 := now()
	w.emit(Event{T: t0, Ev: evCall, Op: evRead, Key: reg, Tok: lock.Token(), Fence: lock.Fence()})
	val, out := w.reg.read(bg, reg, lock.Fence(), lock.Token())
	w.emit(Event{T0: t0, Ev: evRead, Key: reg, Tok: lock.Token(), Fence: lock.Fence(), Out: out, Val: val})

	edgeMode := w.cfg.Control == ControlNoDrift
	if edgeMode {
		// Its last act is its exit, at the edge of its validity: a write
		// there would take a round trip of the validity's end.
		time.Sleep(time.Until(lock.ValidUntil().Add(-edge)))
	} else {
		sleepCtx(ctx, hold)
	}

	if out == outOK && !edgeMode {
		w.writes++
		val = fmt.Sprintf("w%d.%d", w.cfg.ID, w.writes)
		t0 = now()
		w.emit(Event{T: t0, Ev: evCall, Op: evWrite, Key: reg, Tok: lock.Token(), Fence: lock.Fence(), Val: val})
		out = w.reg.write(bg, reg, lock.Fence(), lock.Token(), val)
		w.emit(Event{T0: t0, Ev: evWrite, Key: reg, Tok: lock.Token(), Fence: lock.Fence(), Out: out, Val: val})
	}

	held := lock.Held()
	if !held {
		select {
		case <-ctx.Done():
		case <-time.After(signalWait):
		}
	}
	cause := ""
	switch c := context.Cause(ctx); {
	case errors.Is(c, dlock.ErrLockLost):
		cause = "lost"
	case c != nil:
		cause = "stop"
	}
	seq, prev, err = w.exit(bg, key, me)
	w.emit(Event{Ev: evExit, Key: key, Tok: lock.Token(), Fence: lock.Fence(), Seq: seq, Prev: prev,
		Valid: lock.ValidUntil().UnixNano(), Lost: ended.Load(), Cause: cause, Held: held, Msg: errMsg(err)})

	if w.cfg.Control == ControlPlainDel && !w.cfg.ControlOff {
		// The broken release: DEL whatever is there, ours or not.
		for _, c := range w.lockRDB {
			c.Del(bg, w.cfg.Prefix+key)
		}
	}
}

// enter records entry into the critical section: in one MULTI, the inside
// marker is set to me (returning who was there) and the sequence advances.
// A semaphore's marker is the set of those inside.
func (w *worker) enter(ctx context.Context, key, me string) (seq int64, prev string, err error) {
	var set *redis.StatusCmd
	var incr *redis.IntCmd
	_, err = w.oracle.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if w.cfg.Limit > 0 {
			p.SAdd(ctx, insidePfx+key, me)
		} else {
			set = p.SetArgs(ctx, insidePfx+key, me, redis.SetArgs{Get: true})
		}
		incr = p.Incr(ctx, seqKey)
		return nil
	})
	if err != nil && err != redis.Nil {
		return 0, "", err
	}
	if set != nil {
		prev = set.Val()
	}
	return incr.Val(), prev, nil
}

// exit records leaving it: the sequence advances and the marker is taken
// away (returning what it held).
func (w *worker) exit(ctx context.Context, key, me string) (seq int64, got string, err error) {
	var incr *redis.IntCmd
	var del *redis.StringCmd
	_, err = w.oracle.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, seqKey)
		if w.cfg.Limit > 0 {
			p.SRem(ctx, insidePfx+key, me)
		} else {
			del = p.GetDel(ctx, insidePfx+key)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return 0, "", err
	}
	if del != nil {
		got = del.Val()
	}
	return incr.Val(), got, nil
}

// sentinels names the dlock sentinels err matches, joined by "+"; "stop"
// when the wait ended because the run did.
func sentinels(err error) string {
	if err == nil {
		return ""
	}
	var names []string
	for _, s := range []struct {
		name string
		err  error
	}{
		{"ErrNotAcquired", dlock.ErrNotAcquired}, {"ErrNotHeld", dlock.ErrNotHeld}, {"ErrLockLost", dlock.ErrLockLost},
		{"ErrUnavailable", dlock.ErrUnavailable}, {"ErrMisconfigured", dlock.ErrMisconfigured}, {"ErrInvalid", dlock.ErrInvalid},
	} {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	if errors.Is(err, context.Canceled) && len(names) == 1 && names[0] == "ErrNotAcquired" {
		return "stop"
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err.Error())
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
