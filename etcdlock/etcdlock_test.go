package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
	"github.com/dlock-go/dlock/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	if eps := os.Getenv(waiterEnv); eps != "" {
		os.Exit(runWaiter(strings.Split(eps, ",")))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goleak:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

func newLocker(t *testing.T, cli *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(cli, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// revokeHolder revokes the lease of the first key in key's queue.
func revokeHolder(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key+"/", append([]clientv3.OpOption{clientv3.WithPrefix()}, clientv3.WithFirstCreate()...)...)
	if err != nil {
		t.Fatalf("get holder: %v", err)
	}
	if len(resp.Kvs) == 0 {
		return
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatalf("revoke: %v", err)
	}
}

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, 3)
	admin := c.Client(t)
	locktest.Run(t, func(t *testing.T) dlock.Locker {
		return newLocker(t, c.Client(t))
	}, locktest.WithLapse(func(t *testing.T, key string) { revokeHolder(t, admin, key) }))
}

// queueLen fails unless key's queue has want keys.
func queueLen(ctx context.Context, cli *clientv3.Client, key string, want int) error {
	resp, err := cli.Get(ctx, key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if int(resp.Count) != want {
		return fmt.Errorf("queue of %q has %d keys, want %d", key, resp.Count, want)
	}
	return nil
}

// TestOutage: the conformance suite's outage case, with every member of
// the cluster killed (a majority gone) and restarted.
func TestOutage(t *testing.T) {
	c := etcdtest.Start(t, 3)
	locktest.RunOutage(t, func(t *testing.T) dlock.Locker {
		return newLocker(t, c.Client(t))
	}, func(t *testing.T) func() {
		for _, m := range c.Members {
			m.Kill()
		}
		return func() {
			for _, m := range c.Members {
				m.Restart(t)
			}
		}
	})
}

// queueOrder reads a queue's keys oldest first.
func queueOrder() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
}
