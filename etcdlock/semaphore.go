package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/bridge"
)

var _ driver.Semaphores = (*Locker)(nil)

// Semaphore implements driver.Semaphores (see dlock.Semaphore): its
// TryAcquire grants one of limit permits of name, as the Locker's lock on
// a free slot ({name}#0 to {name}#(limit-1), see dlock.Semaphore), under the
// session's lease, with the slot key's create revision as its fence. See
// Semaphores in the package documentation.
func (l *Locker) Semaphore(limit int) dlock.Locker { return semaphore{l, limit} }

// semaphore is the Locker of Semaphore.
type semaphore struct {
	l     *Locker
	limit int
}

// semTries bounds the reads and transactions of one attempt that lose a
// race to another grant or a change of the limit: the next read sees it.
const semTries = 5

func (s semaphore) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	return s.l.cfg.Events.Attempt(ctx, name, func() (*dlock.Lock, error) { return s.try(ctx, name, ttl) })
}

func (s semaphore) try(ctx context.Context, name string, ttl time.Duration) (*dlock.Lock, error) {
	l := s.l
	if err := l.cfg.CheckPermit(ctx, name, ttl, s.limit); err != nil {
		return nil, err
	}
	for range semTries {
		st, err := l.readSemaphore(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("dlock: acquire %q: %w", name, l.opErr(ctx, err, true))
		}
		slot, err := st.pick(name, s.limit)
		if err != nil {
			return nil, err
		}
		key := bridge.SlotKey(name, slot)
		c, err := l.put(ctx, key, ttl, func(ctx context.Context, c *contender) error {
			return l.semPut(ctx, c, name, st.rev, s.limit)
		})
		if err != nil {
			return nil, err
		}
		if c.ahead == nil {
			c.sem, c.permit = name, slot
			return l.granted(ctx, ttl, c)
		}
		l.free(c.slot) // nothing was written: read again
	}
	return nil, fmt.Errorf("dlock: acquire %q: %w (%d permits were granted or the limit changed while this attempt read the semaphore)",
		name, dlock.ErrNotAcquired, semTries)
}

// semRange is the range of every slot key of name's semaphore: the slot
// keys without their number, prefix+"{name}#" and after. It holds other
// names' keys too ("{name}#x"), which readSemaphore leaves out.
func (l *Locker) semRange(name string) string {
	return l.cfg.Prefix + bridge.SlotPrefix(name)
}

// semState is what a read of a semaphore found: which slots are held, the
// limit its holders recorded (0: none), and the revision of the read.
type semState struct {
	held  map[int]bool
	limit int
	rev   int64
	keys  []*mvccpb.KeyValue // the slot keys that carry the limit
}

// readSemaphore reads every slot key of name's semaphore, in one request.
func (l *Locker) readSemaphore(ctx context.Context, name string) (semState, error) {
	resp, err := l.client.Get(ctx, l.semRange(name), clientv3.WithPrefix())
	if err != nil {
		return semState{}, err
	}
	st := semState{held: map[int]bool{}, rev: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		slot, ok := l.slotOf(name, string(kv.Key))
		if !ok {
			continue
		}
		st.held[slot] = true
		if limit, ok := limitOf(kv.Value); ok {
			st.limit = limit
			st.keys = append(st.keys, kv)
		}
	}
	return st, nil
}

// slotOf returns the slot of name's semaphore that key is a queue key of:
// semRange(name)+slot+"/"+lease.
func (l *Locker) slotOf(name, key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, l.semRange(name))
	if !ok {
		return 0, false
	}
	digits, lease, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	slot, err := strconv.Atoi(digits)
	if err != nil || slot < 0 || slot >= bridge.MaxLimit || strconv.Itoa(slot) != digits {
		return 0, false
	}
	_, ok = parseLease(lease)
	return slot, ok
}

// pick returns the lowest free slot below limit, or why there is none: the
// limit recorded differs, or limit or more permits are held (also on slots
// above limit, kept by holders after the limit shrank).
func (st semState) pick(name string, limit int) (int, error) {
	if st.limit != 0 && st.limit != limit {
		return 0, backend.LimitConflict(name, st.limit, limit)
	}
	if len(st.held) >= limit {
		return 0, fmt.Errorf("dlock: acquire %q: %w (all %d permits are held)", name, dlock.ErrNotAcquired, limit)
	}
	slot := 0
	for st.held[slot] {
		slot++
	}
	return slot, nil
}

// semPut puts c's key, on the slot a read at rev found free, only if no
// key of the semaphore changed since (another grant, a new limit): its
// value records the limit.
func (l *Locker) semPut(ctx context.Context, c *contender, name string, rev int64, limit int) error {
	unchanged := clientv3.Compare(clientv3.ModRevision(l.semRange(name)), "<", rev+1).WithPrefix()
	put := clientv3.OpPut(c.key, l.limitValue(limit), clientv3.WithLease(c.s.id))
	c.start = time.Now()
	resp, err := l.client.Txn(ctx).If(unchanged).Then(put).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		c.ahead = &mvccpb.KeyValue{}
		return nil
	}
	c.rev = resp.Header.Revision
	return nil
}

// limitValue is the value of a permit's key: the holder record (see
// WithHolderInfo) with the semaphore's limit first, or the limit alone.
func (l *Locker) limitValue(limit int) string {
	head := `{"limit":` + strconv.Itoa(limit)
	if v := l.holderValue(); v != "" {
		return head + "," + v[1:]
	}
	return head + "}"
}

// limitOf reads the limit from a permit key's value (limitValue).
func limitOf(value []byte) (int, bool) {
	rest, ok := strings.CutPrefix(string(value), `{"limit":`)
	if !ok {
		return 0, false
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return 0, false
	}
	limit, err := strconv.Atoi(rest[:end])
	return limit, err == nil && limit > 0
}

// SetLimit implements driver.Semaphores (see dlock.SetLimit): it writes
// limit into the value of every permit key of name in one transaction,
// which keeps their leases and create revisions (the permits' fences); a
// grant racing with it reads the semaphore again.
func (l *Locker) SetLimit(ctx context.Context, name string, limit int) error {
	if err := l.cfg.CheckLimit(ctx, name, limit); err != nil {
		return err
	}
	for {
		st, err := l.readSemaphore(ctx, name)
		if err != nil {
			return fmt.Errorf("dlock: set limit %q: %w", name, l.opErr(ctx, err, false))
		}
		if len(st.keys) == 0 {
			return nil // no permit held: nothing recorded
		}
		unchanged := clientv3.Compare(clientv3.ModRevision(l.semRange(name)), "<", st.rev+1).WithPrefix()
		puts := make([]clientv3.Op, 0, len(st.keys))
		for _, kv := range st.keys {
			_, rest, _ := strings.Cut(string(kv.Value), ",")
			v := `{"limit":` + strconv.Itoa(limit) + "}"
			if rest != "" {
				v = `{"limit":` + strconv.Itoa(limit) + "," + rest
			}
			puts = append(puts, clientv3.OpPut(string(kv.Key), v, clientv3.WithIgnoreLease()))
		}
		resp, err := l.client.Txn(ctx).If(unchanged).Then(puts...).Commit()
		if err != nil {
			return fmt.Errorf("dlock: set limit %q: %w", name, l.opErr(ctx, err, false))
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// NotifyRelease implements driver.ReleaseNotifier for the semaphore's
// waits: a watch of its slot keys, from the revision of a read made before
// it returns, announces each deletion (a release, a lease that ran out).
// A watch that fails announces nothing more: the wait polls.
func (s semaphore) NotifyRelease(ctx context.Context, name string) (<-chan struct{}, func()) {
	l := s.l
	if l.cfg.CheckKey(name) != nil || ctx == nil {
		return nil, func() {}
	}
	// The read is the caller's (it must not outlast its deadline); the
	// watch lasts until stop.
	resp, err := l.client.Get(clientv3.WithRequireLeader(ctx), l.semRange(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, func() {}
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	watch := l.client.Watch(wctx, l.semRange(name), clientv3.WithPrefix(), clientv3.WithFilterPut(),
		clientv3.WithRev(resp.Header.Revision+1))
	released := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for resp := range watch {
			if resp.Err() != nil || resp.Canceled {
				cancel()
				continue // until the channel closes
			}
			if len(resp.Events) > 0 {
				select {
				case released <- struct{}{}:
				default:
				}
			}
		}
	})
	return released, func() {
		cancel()
		wg.Wait()
	}
}
