package torture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/etcdsrv"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/servers"
	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
	"github.com/dlock-go/dlock/pglock"
)

// lockServer is one server the locks live on.
type lockServer struct {
	url   string            // what workers are given: a redis:// URL or a DSN
	addr  string            // host:port (or socket path) the proxies forward to
	net   string            // "tcp" or "unix"
	redis *servers.Redis    // a throwaway redis-server; nil for the user's
	pg    *servers.Postgres // a throwaway PostgreSQL; nil for the user's
	rdb   *redis.Client     // a direct client (checks, faults); Redis only
	etcd  *etcdsrv.Member   // a member of the throwaway etcd cluster
	down  bool              // killed and not restarted yet
}

// cluster is every server and proxy of a run.
type cluster struct {
	cfg    *Config
	dir    string
	prefix string // of the lock keys
	keys   []string
	locks  []*lockServer

	oracle   *servers.Redis // the oracle and the Redis guard; no fault touches it
	ordb     *redis.Client
	guardPG  *servers.Postgres // the PostgreSQL guard (pglock runs); no fault touches it
	guardDSN string

	etcd    *etcdsrv.Cluster // the etcd backend's cluster
	etcdCli *clientv3.Client // a direct client of it (checks)

	proxies [][]*tcpproxy.Proxy // [worker][lock server]

	mu sync.Mutex // serializes server faults with the final checks
}

func clientOptions(o *redis.Options) *redis.Options {
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	return o
}

func startCluster(ctx context.Context, cfg *Config) (_ *cluster, err error) {
	c := &cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	var b [4]byte
	rand.Read(b[:])
	c.prefix = "dlock-torture:" + hex.EncodeToString(b[:]) + ":"
	for i := range cfg.Keys {
		c.keys = append(c.keys, "k"+strconv.Itoa(i))
	}
	if c.dir, err = os.MkdirTemp("", "dlock-torture-"); err != nil {
		return nil, err
	}
	if c.oracle, err = servers.NewRedis(c.subdir("oracle")); err != nil {
		return nil, fmt.Errorf("torture: the oracle's redis-server: %w", err)
	}
	c.ordb = redis.NewClient(clientOptions(c.oracle.Options()))

	switch {
	case cfg.Backend == Postgres:
		if err := c.startPostgres(ctx); err != nil {
			return nil, err
		}
	case cfg.Backend == Etcd:
		if c.etcd, err = etcdsrv.Start(ctx, c.subdir("etcd"), cfg.Nodes); err != nil {
			return nil, fmt.Errorf("torture: start etcd: %w", err)
		}
		if c.etcdCli, err = c.etcd.Client(); err != nil {
			return nil, fmt.Errorf("torture: etcd client: %w", err)
		}
		for _, m := range c.etcd.Members {
			c.locks = append(c.locks, &lockServer{url: m.ClientURL, addr: m.ClientAddr, net: "tcp", etcd: m})
		}
	case len(cfg.RedisURLs) > 0:
		for i, u := range cfg.RedisURLs {
			o, err := redis.ParseURL(u)
			if err != nil {
				return nil, bridge.Invalidf("torture: redis URL #%d is not a valid redis:// or rediss:// URL", i+1)
			}
			netw := o.Network
			if netw == "" {
				netw = "tcp"
			}
			ls := &lockServer{url: u, addr: o.Addr, net: netw, rdb: redis.NewClient(clientOptions(o))}
			c.locks = append(c.locks, ls)
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err = ls.rdb.Ping(pctx).Err()
			cancel()
			if err != nil {
				return nil, fmt.Errorf("torture: %w: redis server %s: %w", dlock.ErrUnavailable, o.Addr, err)
			}
		}
	default:
		n := 1
		if cfg.Backend == Redlock {
			n = cfg.Nodes
		}
		for i := range n {
			r, err := servers.NewRedis(c.subdir("redis" + strconv.Itoa(i)))
			if err != nil {
				return nil, fmt.Errorf("torture: start redis-server: %w", err)
			}
			c.locks = append(c.locks, &lockServer{url: r.URL(), addr: r.Addr, net: "tcp", redis: r, rdb: redis.NewClient(clientOptions(r.Options()))})
		}
	}

	c.proxies = make([][]*tcpproxy.Proxy, cfg.Workers+cfg.Observers)
	for w := range c.proxies {
		for _, ls := range c.locks {
			p, err := tcpproxy.New(ls.net, ls.addr, nil)
			if err != nil {
				return nil, fmt.Errorf("torture: proxy: %w", err)
			}
			c.proxies[w] = append(c.proxies[w], p)
		}
	}
	return c, nil
}

// workerConfig is what worker i is told: its servers through its proxies.
// The workers after cfg.Workers are the election's observers.
func (c *cluster) workerConfig(i int) workerConfig {
	cfg := c.cfg
	wc := workerConfig{ID: i, Backend: cfg.Backend, Oracle: c.oracle.Addr, Guard: c.guardDSN, Prefix: c.prefix,
		Keys: c.keys, Limit: cfg.Limit, TTL: cfg.TTL, Hold: cfg.Hold, Seed: cfg.Seed, Control: cfg.Control, ControlOff: cfg.ControlOff,
		DriftFactor: cfg.driftFactor(), Election: cfg.Election, Observer: i >= cfg.Workers}
	for j, ls := range c.locks {
		wc.Locks = append(wc.Locks, ls.url)
		wc.Proxies = append(wc.Proxies, c.proxies[i][j].Addr)
	}
	return wc
}

func (c *cluster) subdir(name string) string {
	d := filepath.Join(c.dir, name)
	os.Mkdir(d, 0o755) // an error shows when the server cannot use it
	return d
}

// startPostgres starts (or connects to) the lock server and starts the
// guard's database, with the register table and a row per key.
func (c *cluster) startPostgres(ctx context.Context) error {
	ls := &lockServer{url: c.cfg.PostgresDSN, net: "tcp"}
	if ls.url == "" {
		pg, err := servers.NewPostgres(c.subdir("postgres"))
		if err != nil {
			return fmt.Errorf("torture: start PostgreSQL: %w", err)
		}
		ls.pg, ls.url = pg, pg.DSN()
	}
	pcfg, err := pgx.ParseConfig(ls.url)
	if err != nil {
		return bridge.Invalidf("torture: the PostgreSQL DSN does not parse")
	}
	ls.addr = net.JoinHostPort(pcfg.Host, strconv.Itoa(int(pcfg.Port)))
	c.locks = append(c.locks, ls)
	err = c.pgExec(ctx, func(conn *pgx.Conn) error {
		if ls.pg != nil {
			return pglock.Migrate(ctx, conn)
		}
		var ok bool
		err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pglock.FenceSequence).Scan(&ok)
		if err == nil && !ok {
			err = fmt.Errorf("%w: the database has no %s sequence: create it with the SQL of pglock.MigrateSQL, or run dlock run --create-fence-table once", dlock.ErrUnavailable, pglock.FenceSequence)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("torture: PostgreSQL: %w", err)
	}

	if c.guardPG, err = servers.NewPostgres(c.subdir("guard")); err != nil {
		return fmt.Errorf("torture: start the guard's PostgreSQL: %w", err)
	}
	c.guardDSN = c.guardPG.DSN()
	pool, err := pgxpool.New(ctx, c.guardDSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, pgRegisterSQL); err != nil {
		return fmt.Errorf("torture: the guard's table: %w", err)
	}
	for _, k := range c.registers() {
		if _, err := pool.Exec(ctx, `INSERT INTO `+registerTbl+` (id) VALUES ($1)`, k); err != nil {
			return fmt.Errorf("torture: the guard's table: %w", err)
		}
	}
	return nil
}

// pgExec runs f on a fresh connection to the PostgreSQL lock server.
func (c *cluster) pgExec(ctx context.Context, f func(*pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.locks[0].url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

func (c *cluster) close() {
	for _, ps := range c.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
	if c.ordb != nil {
		c.ordb.Close()
	}
	if c.oracle != nil {
		c.oracle.Stop()
	}
	for _, ls := range c.locks {
		if ls.rdb != nil {
			if ls.redis == nil && len(c.keys) > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				c.forget(ctx, ls)
				cancel()
			}
			ls.rdb.Close()
		}
		if ls.redis != nil {
			ls.redis.Stop()
		}
		if ls.pg != nil {
			ls.pg.Stop()
		}
	}
	if c.etcdCli != nil {
		c.etcdCli.Close()
	}
	if c.etcd != nil {
		c.etcd.Stop()
	}
	if c.guardPG != nil {
		c.guardPG.Stop()
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// forget deletes every key of this run on a user's Redis server, found with
// SCAN (never KEYS, which blocks a server that may be in use): the lock
// keys and everything dlock keeps beside them (their names contain the
// lock key). It is how a restart is emulated on a server dlock must not
// kill.
func (c *cluster) forget(ctx context.Context, ls *lockServer) error {
	iter := ls.rdb.Scan(ctx, 0, "*"+c.prefix+"*", 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return ls.rdb.Del(ctx, batch...).Err()
	}
	return nil
}

// kill takes the lock servers at idx down: a throwaway server is killed
// (SIGKILL; it loses everything), a user's forgets this run's keys.
func (c *cluster) kill(ctx context.Context, idx []int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, i := range idx {
		ls := c.locks[i]
		switch {
		case ls.etcd != nil:
			ls.etcd.Kill() // SIGKILL: a member keeps what it wrote to disk
			ls.down = true
		case ls.redis != nil:
			ls.redis.Kill()
			ls.down = true
		case ls.pg != nil:
			ls.pg.Stop() // immediate shutdown: every session, and its locks, ends
			ls.down = true
		case ls.rdb != nil:
			errs = append(errs, c.forget(ctx, ls))
		default: // a user's PostgreSQL: end this run's sessions
			_, err := c.terminate(ctx, true)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restart brings killed servers back, empty.
func (c *cluster) restart(idx []int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, i := range idx {
		ls := c.locks[i]
		if !ls.down {
			continue
		}
		switch {
		case ls.etcd != nil:
			errs = append(errs, c.etcd.Restart(ls.etcd))
		case ls.redis != nil:
			errs = append(errs, ls.redis.Restart())
		case ls.pg != nil:
			errs = append(errs, ls.pg.Restart())
		}
		ls.down = false
	}
	return errors.Join(errs...)
}

// terminate ends the PostgreSQL backends holding this run's advisory
// locks (all of them, or the first found) and returns their pids.
func (c *cluster) terminate(ctx context.Context, all bool) ([]int32, error) {
	ids := map[[2]int64]bool{}
	for _, name := range c.lockNames() {
		n, _ := pglock.HashKey(name).Int64()
		ids[[2]int64{int64(uint64(n) >> 32), int64(uint32(n))}] = true
	}
	var pids []int32
	err := c.pgExec(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT pid, classid::int8, objid::int8 FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid <> pg_backend_pid()`)
		if err != nil {
			return err
		}
		var found []int32
		for rows.Next() {
			var pid int32
			var class, obj int64
			if err := rows.Scan(&pid, &class, &obj); err != nil {
				return err
			}
			if ids[[2]int64{class, obj}] {
				found = append(found, pid)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, pid := range found {
			if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid); err != nil {
				return err
			}
			pids = append(pids, pid)
			if !all {
				break
			}
		}
		return nil
	})
	return pids, err
}

// aheadScript moves a single-node fence counter far ahead of the server
// clock (10^12 µs, about eleven days). Fences are at least the server
// clock in µs, so only a counter ahead of it makes fences counter + 1, the
// case in which a counter moved back repeats a fence.
var aheadScript = redis.NewScript(`
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('SET', KEYS[1], string.format('%d', math.max(c, clock + 1000000000000)), 'KEEPTTL')
`)

// rewindScript takes a single node back to its state just before the last
// grant, as a failover to a replica that missed it would: the lock key
// KEYS[1] is deleted and the fence counter KEYS[2] moved back by one, so
// the next grant repeats the fence of the lock that is still held. It
// returns 0 and changes nothing when the counter is not ahead of the
// server clock (fences are at least the clock, so none can repeat) or
// nobody holds the lock.
var rewindScript = redis.NewScript(`
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < clock + 100000000000 or redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], string.format('%d', c - 1), 'KEEPTTL')
return 1
`)

// aheadOfClock moves the fence counters of every key ahead of the clock.
func (c *cluster) aheadOfClock(ctx context.Context) error {
	for _, k := range c.keys {
		if err := aheadScript.Run(ctx, c.locks[0].rdb, []string{keys.Fence(c.prefix + k)}).Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
}

// rewind takes the server back to before the last grant of key.
func (c *cluster) rewind(ctx context.Context, key string) (bool, error) {
	full := c.prefix + key
	n, err := rewindScript.Run(ctx, c.locks[0].rdb, []string{full, keys.Fence(full)}).Int()
	return n == 1, err
}

// cutScript shortens the TTL of a lock key still held by ARGV[1] by ARGV[2]
// ms.
var cutScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local p = redis.call('PTTL', KEYS[1])
if p <= 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], math.max(1, p - tonumber(ARGV[2])))
return 1
`)

// fastClock cuts every new grant's TTL by cut until ctx ends, polling the
// lock keys every millisecond.
func (c *cluster) fastClock(ctx context.Context, cut time.Duration) {
	rdb := c.locks[0].rdb
	last := map[string]string{}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, k := range c.keys {
			full := c.prefix + k
			tok, err := rdb.Get(ctx, full).Result()
			if err != nil || tok == last[k] {
				continue
			}
			last[k] = tok
			cutScript.Run(ctx, rdb, []string{full}, tok, cut.Milliseconds())
		}
	}
}

// holder returns the worker the oracle has inside the critical section of
// one of the keys (tried in the order given), or -1.
func (c *cluster) holder(ctx context.Context, order []int) int {
	for _, i := range order {
		get := c.ordb.Get
		if c.cfg.Limit > 0 {
			get = c.ordb.SRandMember
		}
		v, err := get(ctx, insidePfx+c.keys[i]).Result()
		if err != nil {
			continue
		}
		if id, _, ok := cutID(v); ok {
			return id
		}
	}
	return -1
}

// forgetWorker takes a killed worker's markers out of the oracle's inside
// records, so that faults are no longer aimed at it.
func (c *cluster) forgetWorker(ctx context.Context, worker int) error {
	for _, k := range c.keys {
		var inside []string
		if c.cfg.Limit > 0 {
			inside, _ = c.ordb.SMembers(ctx, insidePfx+k).Result()
		} else if v, err := c.ordb.Get(ctx, insidePfx+k).Result(); err == nil {
			inside = []string{v}
		}
		for _, m := range inside {
			if id, _, ok := cutID(m); !ok || id != worker {
				continue
			}
			var err error
			if c.cfg.Limit > 0 {
				err = c.ordb.SRem(ctx, insidePfx+k, m).Err()
			} else {
				err = c.ordb.Del(ctx, insidePfx+k).Err()
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func cutID(marker string) (int, string, bool) {
	for i := range len(marker) {
		if marker[i] == ':' {
			id, err := strconv.Atoi(marker[:i])
			return id, marker[i+1:], err == nil
		}
	}
	return 0, "", false
}

// locksLeft counts this run's locks still on the servers, waiting up to
// wait for them to go (a lock whose release was lost expires with its TTL;
// a PostgreSQL backend ends a moment after its client).
func (c *cluster) locksLeft(ctx context.Context, wait time.Duration) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := time.Now().Add(wait)
	for {
		n, err := c.countLocks(ctx)
		if err != nil || n == 0 || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) countLocks(ctx context.Context) (int, error) {
	if c.cfg.Backend == Postgres {
		n := 0
		err := c.pgExec(ctx, func(conn *pgx.Conn) error {
			for _, name := range c.lockNames() {
				id, _ := pglock.HashKey(name).Int64()
				var m int
				if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
					AND classid::int8 = $1 AND objid::int8 = $2`, int64(uint64(id)>>32), int64(uint32(id))).Scan(&m); err != nil {
					return err
				}
				n += m
			}
			return nil
		})
		return n, err
	}
	if c.etcd != nil {
		// A lock is a queue of keys under prefix+key+"/"; any left is a
		// holder or waiter whose lease has not expired.
		resp, err := c.etcdCli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return int(resp.Count), nil
	}
	n := 0
	for _, ls := range c.locks {
		for _, name := range c.lockNames() {
			m, err := ls.rdb.Exists(ctx, name).Result()
			if err != nil {
				return n, err
			}
			n += int(m)
		}
	}
	return n, nil
}

// lockNames returns the names of this run's locks on the servers: the
// prefix and each key, or a semaphore's slots' keys (PostgreSQL hashes
// them into advisory keys; there the workers give the prefix in the
// name, on the other backends the Locker adds it).
func (c *cluster) lockNames() []string {
	var names []string
	for _, k := range c.keys {
		switch {
		case c.cfg.Limit == 0:
			names = append(names, c.prefix+k)
		case c.cfg.Backend == Postgres:
			for i := range c.cfg.Limit {
				names = append(names, bridge.SlotKey(c.prefix+k, i))
			}
		default:
			for i := range c.cfg.Limit {
				names = append(names, c.prefix+bridge.SlotKey(k, i))
			}
		}
	}
	return names
}

// registers returns the keys of the guarded registers: one per lock key,
// or one per slot of each semaphore.
func (c *cluster) registers() []string {
	if c.cfg.Limit == 0 {
		return c.keys
	}
	var regs []string
	for _, k := range c.keys {
		for i := range c.cfg.Limit {
			regs = append(regs, bridge.SlotKey(k, i))
		}
	}
	return regs
}
