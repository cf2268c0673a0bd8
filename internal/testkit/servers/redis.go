// Package servers starts and controls throwaway local servers: redis-server
// processes on free loopback ports and PostgreSQL clusters (postgres.go).
// `dlock demo` and `dlock torture` run on them, and internal/testkit/testsrv wraps
// them for tests. It imports no test support, so the dlock binary can use
// it. A missing binary is an error that says how to install it.
package servers

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is one redis-server process. Its methods are safe for concurrent use.
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

// NewRedis starts a redis-server whose files live in dir. The caller must
// call Stop.
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
	// Own process group: a Ctrl-C in the terminal does not kill the server
	// under its owner, and Stop kills it explicitly.
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
