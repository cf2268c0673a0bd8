package etcdlock

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

var _ driver.TermReader = (*Locker)(nil)

// ReadTerm implements driver.TermReader: who holds the lock on key, read as
// concurrency.Election's Leader and `etcdctl elect -l` read the leader of
// an election of that name: the key of key's queue with the lowest create
// revision, in one linearizable read. Fence is that revision, the term;
// Leader the key's value: the identity an election's grant puts there
// (driver.Identity, as `etcdctl elect NAME PROPOSAL` puts its proposal),
// or the host:pid of a holder record (WithHolderInfo; Since then comes
// from it), or "" for a bare lock (concurrency.Mutex, `etcdctl lock`).
// So each side names the other's leader. It returns an error matching
// dlock.ErrUnavailable when the cluster could not be reached.
func (l *Locker) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	if err := l.cfg.CheckRead(ctx, key); err != nil {
		return dlock.Term{}, err
	}
	resp, err := l.client.Get(ctx, l.queue(key), clientv3.WithFirstCreate()...)
	if err != nil {
		return dlock.Term{}, fmt.Errorf("dlock: leader %q: %w", key, l.opErr(ctx, err, false))
	}
	if len(resp.Kvs) == 0 {
		return dlock.Term{}, nil
	}
	kv := resp.Kvs[0]
	t := dlock.Term{Led: true, Fence: uint64(kv.CreateRevision), Leader: string(kv.Value)}
	var rec struct {
		Host  string    `json:"host"`
		PID   int       `json:"pid"`
		Since time.Time `json:"since"`
	}
	if len(kv.Value) > 0 && kv.Value[0] == '{' && json.Unmarshal(kv.Value, &rec) == nil && rec.Host != "" {
		t.Leader, t.Since = rec.Host+":"+strconv.Itoa(rec.PID), rec.Since
	}
	return t, nil
}
