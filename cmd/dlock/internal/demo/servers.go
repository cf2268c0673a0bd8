package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/testkit/servers"
	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
	"github.com/dlock-go/dlock/redislock"
)

// node is one Redis server the demo talks to.
type node struct {
	addr    string        // host:port the user knows it by (never a URL: no password)
	origin  string        // "temporary redis-server", "embedded", "yours"
	version string        // the server's redis_version, when it says
	direct  *redis.Client // for the single-node scenarios and cleanup
	client  *redis.Client // for Redlock: direct, or through a relay it can cut

	// lose takes the node away for the Redlock scenario; how says what it
	// did, in words.
	lose func()
	how  string
	lost bool

	stop func() // ends what the demo started for this node
}

// env is everything Run set up and must take down again.
type env struct {
	nodes    []*node // nodes[0] runs the single-node scenarios
	embedded bool    // servers to start, but no redis-server on PATH: in-process miniredis
	dir      string  // working directories of temporary servers
	prefix   string  // every demo key starts with it
	userURLs bool
	info     serverInfo // of nodes[0]
	lockers  []*redislock.Locker

	tl    *timeline.Recorder // nil unless a timeline was asked for
	scene string             // "2. ": the scenario's lanes start with it
}

// clientOptions are the go-redis options the demo uses: context deadlines
// bound every call, and a dead server is reported at once instead of after
// retries.
func clientOptions(o *redis.Options) *redis.Options {
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialerRetries = 1 // the default 5 tries with 100ms pauses hide a dead node for 400ms
	if o.DialTimeout == 0 || o.DialTimeout > time.Second {
		o.DialTimeout = time.Second
	}
	if o.ReadTimeout == 0 || o.ReadTimeout > 2*time.Second {
		o.ReadTimeout = 2 * time.Second
	}
	if o.WriteTimeout == 0 || o.WriteTimeout > 2*time.Second {
		o.WriteTimeout = 2 * time.Second
	}
	return o
}

// redlockNodes is how many servers the Redlock scenario uses when the user
// gives fewer.
const redlockNodes = 5

// setup connects to the user's servers or starts temporary ones. On error
// it has already undone whatever it started.
func setup(ctx context.Context, opts Options) (*env, error) {
	e := &env{prefix: "dlock-demo:" + bridge.NewToken()[:8] + ":"}
	if err := e.start(ctx, opts); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) start(ctx context.Context, opts Options) error {
	for i, u := range opts.RedisURLs {
		o, err := redis.ParseURL(u)
		if err != nil {
			// The parse error may quote the URL, password included.
			return bridge.Invalidf("redis URL #%d is not a valid redis:// or rediss:// URL", i+1)
		}
		n, err := connectUser(ctx, o)
		if err != nil {
			return err
		}
		e.nodes = append(e.nodes, n)
		e.userURLs = true
	}

	need := redlockNodes - len(e.nodes)
	if _, err := servers.RedisBinary(); err != nil && need > 0 {
		e.embedded = true
	}
	if need > 0 && !e.embedded {
		dir, err := os.MkdirTemp("", "dlock-demo-")
		if err != nil {
			return fmt.Errorf("demo: temporary directory: %w", err)
		}
		e.dir = dir
	}
	for range need {
		if err := ctx.Err(); err != nil {
			return err
		}
		var n *node
		var err error
		if e.embedded {
			n, err = startEmbedded()
		} else {
			n, err = startRedis(e.dir)
		}
		if err != nil {
			return err
		}
		e.nodes = append(e.nodes, n)
	}
	return nil
}

// connectUser connects to a user-given server and checks it answers. The
// Redlock scenario reaches it through an in-process TCP relay, so it can cut
// the server off from the demo (a network partition) without touching the
// server itself, which other clients may be using.
func connectUser(ctx context.Context, o *redis.Options) (*node, error) {
	n := &node{addr: o.Addr, origin: "yours"}
	n.direct = redis.NewClient(clientOptions(o))
	if err := ping(ctx, n.direct); err != nil {
		n.direct.Close()
		return nil, fmt.Errorf("demo: %w: redis server %s: %w", dlock.ErrUnavailable, n.addr, err)
	}
	r, c, err := relayed(o)
	if err != nil {
		n.direct.Close()
		return nil, err
	}
	n.client = c
	n.lose = r.Cut
	n.how = "cut off (the demo's relay to it stops forwarding; the server itself is untouched)"
	n.stop = func() { n.client.Close(); n.direct.Close(); r.Close() }
	return n, nil
}

// relayed starts an in-process TCP relay to the server of o and returns it
// with a client that reaches the server through it.
func relayed(o *redis.Options) (*tcpproxy.Proxy, *redis.Client, error) {
	r, err := tcpproxy.New(o.Network, o.Addr, o.Dialer)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: relay to %s: %w", o.Addr, err)
	}
	ro := *o
	ro.Network, ro.Addr = "tcp", r.Addr
	ro.Dialer = nil
	// TLS must still verify the real server's name, not the relay's.
	if ro.TLSConfig != nil && ro.TLSConfig.ServerName == "" {
		tc := ro.TLSConfig.Clone()
		tc.ServerName, _, _ = net.SplitHostPort(o.Addr)
		ro.TLSConfig = tc
	}
	return r, redis.NewClient(clientOptions(&ro)), nil
}

func ping(ctx context.Context, c *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func startRedis(dir string) (*node, error) {
	sub, err := os.MkdirTemp(dir, "redis-")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	r, err := servers.NewRedis(sub)
	if err != nil {
		return nil, fmt.Errorf("demo: start redis-server: %w", err)
	}
	c := redis.NewClient(clientOptions(r.Options()))
	return &node{
		addr: r.Addr, origin: "temporary redis-server", direct: c, client: c,
		lose: r.Kill, how: "killed (SIGKILL)",
		stop: func() { c.Close(); r.Stop() },
	}, nil
}

func startEmbedded() (*node, error) {
	m := miniredis.NewMiniRedis()
	// miniredis only moves TTLs when told to; with ClockTTL they follow
	// the real clock, which the expiry scenarios depend on.
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("demo: start embedded server: %w", err)
	}
	// miniredis has no INFO server section; Redlock's scripts read the
	// run_id from it to tell servers apart, so answer with one.
	info := "# Server\r\nrun_id:" + bridge.NewToken() + "\r\n"
	m.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
		if cmd == "INFO" && len(args) == 1 && strings.EqualFold(args[0], "server") {
			p.WriteBulk(info)
			return true
		}
		return false
	})
	c := redis.NewClient(clientOptions(&redis.Options{Addr: m.Addr()}))
	return &node{
		addr: m.Addr(), origin: "embedded", direct: c, client: c,
		lose: m.Close, how: "shut down",
		stop: func() { c.Close(); m.Close() },
	}, nil
}

// close stops every server and relay the demo started and removes their
// files. Keys the demo wrote on the user's servers are deleted first.
func (e *env) close() {
	if e == nil {
		return
	}
	for _, l := range e.lockers {
		l.Close()
	}
	if e.userURLs {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		for _, n := range e.nodes {
			if n.origin == "yours" {
				deleteKeys(ctx, n.direct, "*"+e.prefix+"*")
			}
		}
		cancel()
	}
	for _, n := range e.nodes {
		if n.stop != nil {
			n.stop()
		}
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// deleteKeys removes the keys matching pattern, found with SCAN (never KEYS,
// which blocks a server that may be in use).
func deleteKeys(ctx context.Context, c *redis.Client, pattern string) {
	iter := c.Scan(ctx, 0, pattern, 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
	}
	if len(batch) > 0 {
		c.Del(ctx, batch...)
	}
}

// serverInfo describes a node for the header: its Redis version and which
// release/extend path it supports.
type serverInfo struct {
	version string         // "7.0.15", or "" when INFO does not say
	native  rclient.Native // the release and extend commands dlock uses there
}

func probe(ctx context.Context, c *redis.Client, prefix string) (serverInfo, error) {
	var si serverInfo
	info, err := c.Info(ctx, "server").Result()
	if err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				si.version = v
			}
		}
	} else if !isServerError(err) {
		return si, err
	}
	n, _, ok := rclient.Probe(ctx, c, prefix+"probe")
	if !ok {
		return si, fmt.Errorf("no answer to the probe of DELEX, DELIFEQ and SET IFEQ")
	}
	si.native = n
	return si, nil
}

func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && err != redis.Nil
}
