package etcdlock

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
)

var _ dlock.Inspector = (*Locker)(nil)

// Inspect implements dlock.Inspector: the locks under the Locker's prefix
// whose names match pattern (a glob, as on every backend), with the holder's token
// (its lease and its key's create revision, as Lock.Token gives it), the
// lease's remaining TTL, the fence (the holder key's create revision), the
// number of waiters queued behind it and, with WithHolderInfo, who holds
// it, at most limit of them (0: 1000). It reads the queues with one range
// request, bounded to ten keys per lock asked for, and each holder's lease
// with one more; every read is linearizable.
func (l *Locker) Inspect(ctx context.Context, pattern string, limit int) ([]dlock.LockInfo, error) {
	pattern, match, limit, err := backend.CheckInspect(ctx, pattern, limit)
	if err != nil {
		return nil, err
	}
	// Range over the pattern's literal beginning only.
	from := l.cfg.Prefix + pattern[:strings.IndexAny(pattern+"*", "*?[\\")]
	resp, err := l.client.Get(ctx, from, clientv3.WithPrefix(), clientv3.WithLimit(int64(10*limit)))
	if err != nil {
		return nil, fmt.Errorf("dlock: inspect: %w", l.opErr(ctx, err, false))
	}
	queues := l.queues(resp.Kvs, match)
	names := make([]string, 0, len(queues))
	for name := range queues {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) > limit {
		names = names[:limit]
	}
	infos := make([]dlock.LockInfo, 0, len(names))
	for _, name := range names {
		q := queues[name]
		info := dlock.LockInfo{Key: name, Node: l.node, Fence: uint64(q.fence), Token: lockToken(q.named, q.fence),
			Waiting: q.waiting, Majority: true}
		holderOf(&info, q.value)
		info.Limit, _ = limitOf(q.value)
		if ttl, err := l.client.TimeToLive(ctx, q.owner); err == nil && ttl.TTL > 0 {
			info.TTL = time.Duration(ttl.TTL) * time.Second
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// inspected is what Inspect reads of one lock's queue.
type inspected struct {
	named   clientv3.LeaseID // the lease whose id names the holder's key
	owner   clientv3.LeaseID // the lease it lives by (another once extended beyond it)
	fence   int64
	value   []byte // the holder key's
	waiting int
}

// queues sorts the keys read by Inspect into the queues of the locks whose
// names match, by name.
func (l *Locker) queues(kvs []*mvccpb.KeyValue, match *regexp.Regexp) map[string]*inspected {
	queues := map[string]*inspected{}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(string(kv.Key), l.cfg.Prefix)
		i := strings.LastIndex(rest, "/") // names may hold slashes; the lease is last
		if i < 0 || kv.Lease == 0 {
			continue // not a lock key
		}
		named, ok := parseLease(rest[i+1:])
		if !ok {
			continue
		}
		name := rest[:i]
		if !match.MatchString(name) {
			continue
		}
		q := queues[name]
		if q == nil {
			q = &inspected{}
			queues[name] = q
		}
		if q.fence == 0 || kv.CreateRevision < q.fence {
			if q.fence != 0 {
				q.waiting++
			}
			q.named, q.owner, q.fence, q.value = named, clientv3.LeaseID(kv.Lease), kv.CreateRevision, kv.Value
		} else {
			q.waiting++
		}
	}
	return queues
}
