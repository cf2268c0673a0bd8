package etcdlock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
)

// A cluster that refuses for a reason retrying cannot change (auth is on,
// and the client gave no user, or a user without permission on the lock
// keys) makes Do fail at once with dlock.ErrMisconfigured and the
// cluster's own reason.
func TestMisconfigured(t *testing.T) {
	c := etcdtest.Start(t, 1)
	enableAuth(t, c, "app", "apppw")
	lockcheck.WantRefused(t, newLocker(t, c.Client(t)), lockcheck.Key(t), "user name is empty")
	lockcheck.WantRefused(t, newLocker(t, authClient(t, c, "app", "apppw")), lockcheck.Key(t), "permission denied")
	// A refused attempt deletes its queue key in the background, within
	// its TTL: wait for that, so that the leak check does not find it.
	lockcheck.Eventually(t, 15*time.Second, func() error {
		buf := make([]byte, 1<<20)
		if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "etcdlock.(*Locker).abandon") {
			return errors.New("a refused attempt's clean-up still runs")
		}
		return nil
	})
}

// enableAuth turns on authentication on c, with a root user (password
// "rootpw") and user, who has password and no role: no permission on any
// key.
func enableAuth(t *testing.T, c *etcdtest.Cluster, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := c.Client(t)
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, user, password); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enabling auth: %v", err)
		}
	}
}

// authClient returns a client of c that logs in as user.
func authClient(t *testing.T, c *etcdtest.Cluster, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		Username: user, Password: password, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client as %s: %v", user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
