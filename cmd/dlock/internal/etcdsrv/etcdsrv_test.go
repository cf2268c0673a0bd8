package etcdsrv

import (
	"context"
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
