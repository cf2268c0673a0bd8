package etcdlock_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
)

// Do runs a function under the lock; its context ends with dlock.ErrLockLost
// if the lease is lost.
func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	l, err := etcdlock.New(cli)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = dlock.Do(context.Background(), l, "reports", 10*time.Second, func(ctx context.Context) error {
		// ... work that checks ctx, fenced writes ...
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
