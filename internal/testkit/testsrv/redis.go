// Package testsrv starts real servers for tests: redis-server processes on
// free loopback ports and throwaway PostgreSQL clusters, through package
// servers, stopped when the test ends. A missing binary fails the test with
// the command that installs it; a silent skip would hide a broken setup.
package testsrv

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testkit/servers"
)

// Redis is one redis-server process started for a test.
type Redis struct{ *servers.Redis }

// RedisOption adds redis-server command-line arguments.
type RedisOption = servers.RedisOption

// RedisArgs appends raw redis-server arguments, e.g.
// RedisArgs("--appendonly", "yes", "--appendfsync", "always").
func RedisArgs(args ...string) RedisOption { return servers.RedisArgs(args...) }

// RedisBinary returns the path of redis-server, or an error saying how to
// install it.
func RedisBinary() (string, error) { return servers.RedisBinary() }

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) { return servers.FreePort() }

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

// NewRedis starts a redis-server whose files live in dir, for servers shared
// by a package's tests (from TestMain). The caller must call Stop.
func NewRedis(dir string, opts ...RedisOption) (*Redis, error) {
	r, err := servers.NewRedis(dir, opts...)
	if err != nil {
		return nil, err
	}
	return &Redis{r}, nil
}

// Client returns a go-redis client for this server, closed when the test
// ends. Its timeouts are short, so tests of dead servers finish quickly.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(r.Options())
	tb.Cleanup(func() { c.Close() })
	return c
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
