// Package etcdsrv starts local etcd clusters for dlock's tests, demo and
// torture runs: real etcd server processes (the etcd binary on PATH,
// Debian's etcd-server package) on free loopback ports, which can be killed,
// paused and restarted.
package etcdsrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ErrNoEtcd is returned by Start when no etcd binary is on PATH.
var ErrNoEtcd = errors.New("etcd not found on PATH (apt-get install etcd-server)")

// Member is one etcd server process of a Cluster.
type Member struct {
	Name       string
	ClientURL  string
	ClientAddr string // host:port
	args       []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Cluster is a set of etcd members.
type Cluster struct {
	Members []*Member
	bin     string
}

// Installed says whether an etcd binary is on PATH.
func Installed() bool {
	_, err := exec.LookPath("etcd")
	return err == nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start starts an n-member cluster with its data under dir, with short raft
// timings (10ms heartbeat, 100ms election) so that elections are quick and
// the minimum lease TTL is one second, and waits until it has a leader. On
// error nothing is left running.
func Start(ctx context.Context, dir string, n int) (_ *Cluster, err error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrNoEtcd
	}
	c := &Cluster{bin: bin}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	var initial, peers []string
	for i := range n {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		m := &Member{
			Name:       fmt.Sprintf("m%d", i),
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", cp),
			ClientURL:  fmt.Sprintf("http://127.0.0.1:%d", cp),
		}
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", pp))
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+peers[i])
	}
	for i, m := range c.Members {
		mdir := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(mdir, 0o700); err != nil {
			return nil, err
		}
		m.args = []string{
			"--name", m.Name, "--data-dir", filepath.Join(mdir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "dlock",
			"--heartbeat-interval", "10", "--election-timeout", "100",
			"--logger", "zap", "--log-outputs", filepath.Join(mdir, "etcd.log"),
		}
		if err := m.start(bin); err != nil {
			return nil, fmt.Errorf("start etcd %s: %w", m.Name, err)
		}
	}
	return c, c.WaitHealthy(ctx, 30*time.Second)
}

func (m *Member) start(bin string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(bin, m.args...)
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=")
	// Its own process group: a Ctrl-C to the demo must not kill the
	// members before the demo has finished with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	m.cmd = cmd
	return nil
}

// Running says whether the member's process is running (possibly stopped).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// Pid is the member's process id, 0 when it is not running.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Kill stops the member with SIGKILL and waits for it to exit. It does
// nothing when the member is not running.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd := m.cmd
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused member must still die
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// Restart starts a killed member again with its data.
func (c *Cluster) Restart(m *Member) error {
	if m.Running() {
		return nil
	}
	for i, a := range m.args {
		if a == "--initial-cluster-state" {
			m.args[i+1] = "existing"
		}
	}
	return m.start(c.bin)
}

// Stop kills every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Kill()
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

// Client returns a client of the given endpoints (all members' by default).
// The caller closes it.
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
}

// WaitHealthy waits up to timeout until every running member answers and
// knows a leader.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		for {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, m.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd %s not healthy after %v: %v", m.Name, timeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
