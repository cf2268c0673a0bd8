// Package etcdsrv starts local etcd clusters for dlock's tests, demo and
// torture runs on free loopback ports: real etcd server processes (Start:
// the etcd binary on PATH, Debian's etcd-server package), which can be
// killed, paused and restarted, or the same server run inside this process
// (StartEmbedded), for the demo where no etcd binary is installed.
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
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNoEtcd is returned by Start when no etcd binary is on PATH.
var ErrNoEtcd = errors.New("etcd not found on PATH (apt-get install etcd-server)")

// Member is one etcd server of a Cluster: a process, or a server inside
// this process (StartEmbedded).
type Member struct {
	Name       string
	ClientURL  string
	ClientAddr string // host:port

	peerURL, initial, dir string
	bin                   string // the etcd binary; "" for an embedded member

	mu     sync.Mutex
	state  string // "new" until the first start, then "existing"
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
	emb    *embed.Etcd
	closed chan struct{} // closed once the last embedded server has closed
}

// Cluster is a set of etcd members.
type Cluster struct {
	Members []*Member
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

// Start starts an n-member cluster of etcd processes with their data under
// dir, with short raft timings (10ms heartbeat, 100ms election) so that
// elections are quick and the minimum lease TTL is one second, and waits
// until it has a leader. On error nothing is left running.
func Start(ctx context.Context, dir string, n int) (*Cluster, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrNoEtcd
	}
	return start(ctx, dir, n, bin)
}

// StartEmbedded is Start with the members run inside this process
// (go.etcd.io/etcd/server/v3/embed: etcd's own server, the same Raft and
// storage): for where no etcd binary is installed. Kill stops a member's
// server, which closes its connections as a killed process's would, and
// Restart starts it again on its data; Pid is 0, so a member cannot be
// paused with a signal.
func StartEmbedded(ctx context.Context, dir string, n int) (*Cluster, error) {
	return start(ctx, dir, n, "")
}

// start starts the cluster. A free port can be taken by another process
// between the pick and etcd's bind, so a cluster that does not come up is
// started again on other ports, up to three times.
func start(ctx context.Context, dir string, n int, bin string) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startOnce(ctx, dir, n, bin)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			return c, err
		}
	}
}

func startOnce(ctx context.Context, dir string, n int, bin string) (_ *Cluster, err error) {
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
			for _, m := range c.Members {
				_ = os.RemoveAll(m.dir)
			}
		}
	}()
	var initial []string
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
			peerURL:    fmt.Sprintf("http://127.0.0.1:%d", pp),
			dir:        filepath.Join(dir, fmt.Sprintf("m%d", i)),
			bin:        bin,
			state:      "new",
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.peerURL)
	}
	for _, m := range c.Members {
		m.initial = strings.Join(initial, ",")
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return nil, err
		}
		if err := m.start(); err != nil {
			return nil, fmt.Errorf("start etcd %s: %w", m.Name, err)
		}
	}
	return c, c.WaitHealthy(ctx, 20*time.Second)
}

// start starts the member, a process or an embedded server.
func (m *Member) start() error {
	m.wait() // an embedded member's ports are free once it has closed
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bin == "" {
		return m.startEmbedded()
	}
	cmd := exec.Command(m.bin,
		"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", m.initial, "--initial-cluster-state", m.state,
		"--initial-cluster-token", "dlock",
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--logger", "zap", "--log-outputs", filepath.Join(m.dir, "etcd.log"))
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=")
	// Its own process group: a Ctrl-C to the demo must not kill the
	// members before the demo has finished with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.cmd, m.exited, m.state = cmd, exited, "existing"
	return nil
}

// exitedEarly says why the member's process is gone when it exited without
// being killed (a port taken, most often), from the end of its log.
func (m *Member) exitedEarly() error {
	m.mu.Lock()
	exited := m.exited
	m.mu.Unlock()
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
	default:
		return nil
	}
	log, _ := os.ReadFile(filepath.Join(m.dir, "etcd.log"))
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return fmt.Errorf("etcd %s exited: %s", m.Name, lines[len(lines)-1])
}

// Running says whether the member is running (a process possibly
// stopped).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil || m.emb != nil
}

// Pid is the member's process id, 0 when it is not running or embedded.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Kill stops the member with SIGKILL and waits for it to exit. An
// embedded member stops at once too (its Raft node halts, with no
// leadership transfer, and its listeners close); its connections are then
// closed in the background, for up to etcd's request timeout (5s), and
// Restart and Stop wait for that. Kill does nothing when the member is not
// running.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, exited, emb := m.cmd, m.exited, m.emb
	m.cmd, m.emb = nil, nil
	if emb != nil {
		m.closed = make(chan struct{})
	}
	closed := m.closed
	m.mu.Unlock()
	if emb != nil {
		emb.Server.HardStop()
		go func() { emb.Close(); close(closed) }()
	}
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused member must still die
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// wait waits until an embedded member's last server has closed.
func (m *Member) wait() {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed != nil {
		<-closed
	}
}

// Restart starts a killed member again with its data.
func (c *Cluster) Restart(m *Member) error {
	if m.Running() {
		return nil
	}
	return m.start()
}

// Stop kills every member and waits until they are gone.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Kill()
	}
	for _, m := range c.Members {
		m.wait()
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
			if exit := m.exitedEarly(); exit != nil {
				return exit
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
