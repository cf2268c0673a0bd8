package etcdtest

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPortTakenFailsFast: a member whose port another process took exits,
// and the wait for health says so at once, with etcd's reason, instead of
// polling to its deadline (which is what Start's retry on other ports
// relies on).
func TestPortTakenFailsFast(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal("etcd not found on PATH; install it with: apt-get install -y etcd-server (or run `make test`, which does)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	m := &Member{Name: "m0", ClientURL: "http://" + ln.Addr().String(), dir: t.TempDir()}
	m.args = []string{"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--logger", "zap", "--log-outputs", filepath.Join(m.dir, "etcd.log")}
	c := &Cluster{Members: []*Member{m}}
	if err := m.start(bin); err != nil {
		t.Fatal(err)
	}
	defer c.kill()
	start := time.Now()
	err = c.waitHealthy(20 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("waitHealthy: %v; want the member's exit for the taken port", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the exit was reported after %v", waited)
	}
}
