package etcdsrv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// TestMain checks that no goroutine is left once the peer connections of
// stopped embedded members have closed.
func TestMain(m *testing.M) { testsrv.VerifyTestMain(m, 10*time.Second) }

// TestEmbedded: an embedded cluster keeps serving, with its data, when its
// leader is killed, which takes effect at once (a lease kept alive through
// the kill survives it); the member restarts on its data; Stop leaves no
// goroutine behind (TestMain).
func TestEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := StartEmbedded(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, c)
	start := time.Now()
	leader.Kill()
	if took := time.Since(start); took > time.Second || leader.Running() || leader.Pid() != 0 {
		t.Fatalf("Kill took %v (running after: %v, pid %d); want at once", took, leader.Running(), leader.Pid())
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatalf("the two members left: %v", err)
	}
	if _, err := cli.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatalf("the lease after the leader's kill, %v after it: %v", time.Since(start), err)
	}
	if _, err := cli.Put(ctx, "k", "after"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	one, err := c.Client(leader.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	r, err := one.Get(ctx, "k") // linearizable: the restarted member caught up
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "after" {
		t.Fatalf("k on the restarted member: %v, %v; want after", r, err)
	}
}

func leaderOf(t *testing.T, c *Cluster) *Member {
	t.Helper()
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, m := range c.Members {
		st, err := cli.Status(context.Background(), m.ClientURL)
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	t.Fatal("no leader")
	return nil
}

// TestPortTakenFailsFast: a member whose client port another process took
// exits, and WaitHealthy says so at once, with etcd's reason, instead of
// polling to its deadline (which is what start's retry on other ports
// relies on).
func TestPortTakenFailsFast(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("no etcd on PATH")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pp, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	m := &Member{Name: "m0", ClientURL: "http://" + ln.Addr().String(),
		peerURL: fmt.Sprintf("http://127.0.0.1:%d", pp), dir: t.TempDir(), bin: bin, state: "new"}
	m.initial = m.Name + "=" + m.peerURL
	c := &Cluster{Members: []*Member{m}}
	if err := m.start(); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	start := time.Now()
	err = c.WaitHealthy(context.Background(), 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("WaitHealthy: %v; want the member's exit for the taken port", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the exit was reported after %v", waited)
	}
}
