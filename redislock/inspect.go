package redislock

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/nodeerr"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rinspect"
)

var _ dlock.Inspector = (*Locker)(nil)

// Inspect implements dlock.Inspector: the locks whose keys, without the
// Locker's prefix, match pattern, with each one's TTL, token, fence
// counter, holder (WithHolderInfo, `dlock run`) and Lockers queued
// (Waiting: a Locker counts once). Any string key with a TTL is listed, as
// another client's lock (SET NX PX) is one; dlock's own keys are not. The
// keys are found with SCAN ... TYPE string (Redis 6 or later) on every
// master of a Cluster. At most limit locks are returned (0: 1000), sorted
// by key: the first the scan finds, not the first by name. It returns an
// error matching dlock.ErrUnavailable when a server could not be reached
// or answered with an error.
func (l *Locker) Inspect(ctx context.Context, pattern string, limit int) ([]dlock.LockInfo, error) {
	pattern, _, limit, err := backend.CheckInspect(ctx, pattern, limit)
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		rows []dlock.LockInfo
	)
	scan := func(ctx context.Context, c redis.UniversalClient, node string) error {
		r, err := rinspect.Scan(ctx, c, node, l.cfg.Prefix, pattern, limit)
		if err != nil {
			return nodeerr.Error(ctx, node, err, rclient.Kind(err), false)
		}
		mu.Lock()
		rows = append(rows, r...)
		mu.Unlock()
		return nil
	}
	if cc, ok := l.node.Client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return scan(ctx, c, c.Options().Addr)
		})
	} else {
		err = scan(ctx, l.node.Client, l.node.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("dlock: inspect: %w", err)
	}
	rows = rinspect.Sort(rows)
	if len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, nil
}
