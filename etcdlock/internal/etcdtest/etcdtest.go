// Package etcdtest starts etcd clusters for tests: real etcd server
// processes (the etcd binary on PATH, Debian's etcd-server package) on free
// loopback ports, so that tests can kill and restart members.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one etcd server process of a Cluster.
type Member struct {
	Name       string
	ClientURL  string
	ClientAddr string // host:port
	peerURL    string
	dir        string
	args       []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
}

// Cluster is a set of etcd members started for a test.
type Cluster struct {
	Members []*Member
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start starts an n-member cluster with short raft timings (10ms heartbeat,
// 100ms election) so that leader elections are fast and the minimum lease
// TTL is one second. A free port can be taken by another process between
// the pick and etcd's bind, so a cluster that does not come up is started
// again on other ports, up to three times. It fails the test when no etcd
// binary is installed (scripts/install-deps.sh installs it). The cluster is
// stopped at cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal("etcd not found on PATH; install it with: apt-get install -y etcd-server (or run `make test`, which does)")
	}
	for attempt := 1; ; attempt++ {
		c, err := start(t, bin, n)
		if err == nil {
			t.Cleanup(c.kill)
			return c
		}
		if attempt == 3 {
			t.Fatalf("etcd cluster: %v", err)
		}
		t.Logf("etcd cluster did not start, trying other ports: %v", err)
	}
}

// start starts the members and waits until they are healthy; on error it
// leaves nothing running.
func start(t testing.TB, bin string, n int) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	for i := range n {
		cp, pp := freePort(t), freePort(t)
		m := &Member{
			Name:       fmt.Sprintf("m%d", i),
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", cp),
			ClientURL:  fmt.Sprintf("http://127.0.0.1:%d", cp),
			peerURL:    fmt.Sprintf("http://127.0.0.1:%d", pp),
			dir:        t.TempDir(),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.peerURL)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "dlock-test",
			"--heartbeat-interval", "10", "--election-timeout", "100",
			"--logger", "zap", "--log-outputs", filepath.Join(m.dir, "etcd.log"),
		}
		if err := m.start(bin); err != nil {
			c.kill()
			return nil, fmt.Errorf("start etcd %s: %v", m.Name, err)
		}
	}
	if err := c.waitHealthy(20 * time.Second); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) kill() {
	for _, m := range c.Members {
		m.Kill()
	}
}

func (m *Member) start(bin string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(bin, m.args...)
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=")
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.cmd, m.exited = cmd, exited
	return nil
}

// exitedEarly says why the member's process is gone when it exited without
// being killed (a port taken, most often), from the end of its log.
func (m *Member) exitedEarly() error {
	m.mu.Lock()
	exited := m.exited
	m.mu.Unlock()
	select {
	case <-exited:
	default:
		return nil
	}
	log, _ := os.ReadFile(filepath.Join(m.dir, "etcd.log"))
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return fmt.Errorf("etcd %s exited: %s", m.Name, lines[len(lines)-1])
}

// Kill stops the member with SIGKILL and waits for it to exit. It does
// nothing when the member is not running.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused member must still die
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Pause freezes the member with SIGSTOP, as a machine that stopped: its
// connections stay open and nothing answers on them. Resume undoes it; the
// cluster's cleanup resumes a member still paused before killing it.
func (m *Member) Pause(t testing.TB) { m.signal(t, syscall.SIGSTOP) }

// Resume continues a paused member (SIGCONT).
func (m *Member) Resume(t testing.TB) { m.signal(t, syscall.SIGCONT) }

func (m *Member) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		t.Fatalf("etcd %s is not running", m.Name)
	}
	if err := m.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal etcd %s: %v", m.Name, err)
	}
}

// Restart starts a killed member again with its data.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	bin, _ := exec.LookPath("etcd")
	args := append([]string(nil), m.args...)
	for i, a := range args {
		if a == "--initial-cluster-state" {
			args[i+1] = "existing"
		}
	}
	m.args = args
	if err := m.start(bin); err != nil {
		t.Fatalf("restart etcd %s: %v", m.Name, err)
	}
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Client returns a client of the cluster (all endpoints, or those given),
// closed at cleanup.
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cli, err := newClient(endpoints)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newClient returns a quiet client of endpoints, for Client and
// waitHealthy.
func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second, Logger: zap.NewNop()})
}

// WaitHealthy waits until every running member answers and the cluster has
// a leader.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := c.waitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) waitHealthy(timeout time.Duration) error {
	cli, err := newClient(c.Endpoints())
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	for _, m := range c.Members {
		m.mu.Lock()
		running := m.cmd != nil
		m.mu.Unlock()
		for running {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 {
				break
			}
			if exit := m.exitedEarly(); exit != nil {
				return exit
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd %s not healthy after %v: %v", m.Name, timeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Leader returns the member that is the raft leader.
func (c *Cluster) Leader(t testing.TB) *Member {
	t.Helper()
	cli := c.Client(t)
	for _, m := range c.Members {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	t.Fatal("no etcd leader")
	return nil
}
