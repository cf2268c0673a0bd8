// Package testsrv starts real servers for tests: redis-server processes on
// free loopback ports (and, in postgres.go, a throwaway PostgreSQL cluster).
// A missing binary fails the test with the command that installs it; a
// silent skip would hide a broken setup.
package testsrv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is one redis-server process started for a test.
type Redis struct {
	Addr string // host:port on loopback
	Port int
	Dir  string // working directory (AOF, RDB)

	extraArgs []string
	process
}

// RedisOption adds redis-server command-line arguments, e.g.
// RedisArgs("--appendonly", "yes", "--appendfsync", "always").
type RedisOption func(*Redis)

// RedisArgs appends raw redis-server arguments.
func RedisArgs(args ...string) RedisOption {
	return func(r *Redis) { r.extraArgs = append(r.extraArgs, args...) }
}

// RedisBinary returns the path of redis-server, or an error saying how to
// install it.
func RedisBinary() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH; install it with: apt-get install -y redis-server (or run `make test`, which does)")
	}
	return p, nil
}

// StartRedis starts a redis-server on a free loopback port and stops it when
// the test ends. Persistence is off unless opts turn it on.
func StartRedis(tb testing.TB, opts ...RedisOption) *Redis {
	tb.Helper()
	r, err := NewRedis(tb.TempDir(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// StartRedisN starts n independent redis-servers (for Redlock).
func StartRedisN(tb testing.TB, n int, opts ...RedisOption) []*Redis {
	tb.Helper()
	rs := make([]*Redis, n)
	for i := range rs {
		rs[i] = StartRedis(tb, opts...)
	}
	return rs
}

// NewRedis starts a redis-server whose files live in dir. The caller must
// call Stop. It is the non-test form of StartRedis (used by `dlock demo`).
func NewRedis(dir string, opts ...RedisOption) (*Redis, error) {
	if _, err := RedisBinary(); err != nil {
		return nil, err
	}
	r := &Redis{Dir: dir}
	for _, o := range opts {
		o(r)
	}
	var lastErr error
	for range 5 { // a freed port can be taken before we bind it: try again
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		r.Port = port
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = r.start(); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

func (r *Redis) args() []string {
	a := []string{
		"--port", strconv.Itoa(r.Port),
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", filepath.Join(r.Dir, "redis.log"),
	}
	return append(a, r.extraArgs...)
}

func (r *Redis) start() error {
	bin, err := RedisBinary()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, r.args()...)
	cmd.Dir = r.Dir
	// Own process group: a Ctrl-C on the test does not kill the server
	// under the harness, and Stop kills it explicitly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := r.track(cmd)

	switch waitReady(exited, 10*time.Second, 10*time.Millisecond, r.ping) {
	case errExited:
		return fmt.Errorf("redis-server on port %d exited at start: %s", r.Port, r.logTail())
	case errNotReady:
		r.Kill()
		return fmt.Errorf("redis-server on port %d did not answer within 10s: %s", r.Port, r.logTail())
	}
	return nil
}

func (r *Redis) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

func (r *Redis) logTail() string {
	b, _ := os.ReadFile(filepath.Join(r.Dir, "redis.log"))
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return s
}

// Client returns a go-redis client for this server, closed when the test
// ends. Its timeouts are short, so tests of dead servers finish quickly.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(r.Options())
	tb.Cleanup(func() { c.Close() })
	return c
}

// Options returns go-redis options for this server.
func (r *Redis) Options() *redis.Options {
	return &redis.Options{
		Addr:                  r.Addr,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
}

// URL returns a redis:// URL for this server.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// Kill sends SIGKILL and waits for the process to exit. Without persistence
// the server's data is gone.
func (r *Redis) Kill() { r.signal(syscall.SIGKILL, true) }

// Pause stops the server with SIGSTOP: connections stay open, nothing is
// answered. Resume continues it.
func (r *Redis) Pause() { r.signal(syscall.SIGSTOP, false) }

// Resume continues a paused server (SIGCONT).
func (r *Redis) Resume() { r.signal(syscall.SIGCONT, false) }

// Restart starts the server again on the same port after Kill (or Stop). It
// comes back empty unless persistence was configured.
func (r *Redis) Restart() error {
	r.Kill()
	var err error
	for range 50 { // the port may linger briefly after the kill
		if err = r.start(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Stop ends the server (SIGCONT first, in case it was paused) and waits for it.
func (r *Redis) Stop() {
	r.Resume()
	r.Kill()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Flush empties a server between tests that share it.
func Flush(ctx context.Context, c redis.UniversalClient) error { return c.FlushAll(ctx).Err() }

// StartRedisCluster starts a Redis Cluster of n masters (no replicas) on
// free ports, with all 16384 slots assigned, and returns its node addresses.
func StartRedisCluster(tb testing.TB, n int) []string {
	tb.Helper()
	nodes := make([]*Redis, n)
	addrs := make([]string, n)
	for i := range nodes {
		nodes[i] = StartRedis(tb, RedisArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))
		addrs[i] = nodes[i].Addr
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redis-cli not found on PATH; install it with: apt-get install -y redis-tools")
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Wait until every node agrees the cluster is up.
	deadline := time.Now().Add(15 * time.Second)
	for _, r := range nodes {
		for {
			out, _ := exec.Command(cli, "-h", "127.0.0.1", "-p", strconv.Itoa(r.Port), "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("cluster node %s not ok: %s", r.Addr, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}
