package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/bridge"
)

// session is one lease that a Locker shares between its locks of one lease
// TTL (see the package doc, "A lease per session"). Its fields other than
// id and seconds are guarded by the Locker's mu.
//
// It exists for speed: a lease per lock costs a lease grant and a
// revocation per cycle (see bench/RESULTS.md, "etcd: etcdlock against
// concurrency.Mutex").
type session struct {
	id      clientv3.LeaseID
	seconds int64 // the TTL it was granted with, as asked
	// aliveUntil is when the lease is known to live until: the send time
	// of the last grant or keep-alive that succeeded plus the TTL the
	// cluster answered with. The lease may live longer, never shorter
	// (the cluster counts from when it received the request), unless it
	// is revoked.
	aliveUntil time.Time
	// dead: the cluster said the lease is gone (expired or revoked), or
	// Close revoked it. Nothing new is put under it.
	dead bool
	// names are the locks with a key under the lease, by name: held,
	// waiting, or whose release is of unknown outcome. One lease has at
	// most one key per lock name (the key is the name and the lease id),
	// so a second acquisition of a name in use takes another session.
	names map[string]*slot
}

// slot is one lock's place on a session, from its reservation by take
// until its key is known to be gone. Its fields are guarded by the
// Locker's mu.
type slot struct {
	s    *session // whose lease id names the key
	name string
	key  string
	// on is the session whose lease the key lives by: s, or a lease of the
	// lock's own once an extension beyond s's TTL moved the key under it.
	on *session
	// rev is the key's create revision once the lock is granted (0 while
	// it waits), and validUntil its handle's validity, as granted or last
	// extended.
	rev        int64
	validUntil time.Time
	extending  int // Extends in flight: sweep leaves the lock alone
	// lost: sweep found the validity ended unextended and deletes the key
	// (or retries at the next renewal); Extend refuses from then on.
	lost bool
	// doomed: the key stands for no lock (an abandoned wait, a put of
	// unknown outcome) and must be deleted; sweep retries until it is.
	doomed bool
	lock   *dlock.Lock // the handle, once granted
}

// errLeaseGone: the cluster has no such lease (it expired or was revoked).
var errLeaseGone = errors.New("the lease expired or was revoked")

// take returns a slot for an acquisition of name with ttl, reserved on a
// session: a live one of the same lease TTL without a key for name,
// renewed first when less than half of ttl is known to be left of it, or
// else a new lease.
func (l *Locker) take(ctx context.Context, name string, ttl time.Duration) (*slot, error) {
	secs := leaseSeconds(ttl)
	for {
		l.mu.Lock()
		now := time.Now()
		var s *session
		kept := l.sessions[secs][:0]
		for _, x := range l.sessions[secs] {
			alive := !x.dead && x.aliveUntil.After(now)
			if !alive && len(x.names) == 0 {
				continue // lapsed or revoked, with no key of ours: forget it
			}
			kept = append(kept, x)
			if _, used := x.names[name]; s == nil && alive && !used {
				s = x
			}
		}
		clear(l.sessions[secs][len(kept):])
		l.sessions[secs] = kept
		if s == nil {
			l.mu.Unlock()
			return l.grantSession(ctx, name, secs)
		}
		sl := &slot{s: s, on: s, name: name, key: l.queue(name) + token(s.id)}
		s.names[name] = sl
		renew := s.aliveUntil.Sub(now) < ttl/2
		l.mu.Unlock()
		if !renew {
			return sl, nil
		}
		_, err := l.renew(ctx, s, true)
		if err == nil {
			return sl, nil
		}
		l.free(sl)
		if !errors.Is(err, errLeaseGone) {
			return nil, err
		}
		// Gone: the loop forgets it and takes another.
	}
}

// queued reports whether one of the Locker's live sessions has a key of
// name's queue, or is putting one there. A session that lapsed does not
// count: its key may be gone.
func (l *Locker) queued(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, pool := range l.sessions {
		for _, s := range pool {
			if s.names[name] != nil && !s.dead && s.aliveUntil.After(now) {
				return true
			}
		}
	}
	return false
}

// grantSession grants a new lease of secs seconds with name reserved on it.
func (l *Locker) grantSession(ctx context.Context, name string, secs int64) (*slot, error) {
	start := time.Now()
	resp, err := l.client.Grant(ctx, secs)
	if err != nil {
		return nil, l.opErr(ctx, err, true)
	}
	s := &session{id: resp.ID, seconds: secs, aliveUntil: start.Add(time.Duration(resp.TTL) * time.Second)}
	sl := &slot{s: s, on: s, name: name, key: l.queue(name) + token(s.id)}
	s.names = map[string]*slot{name: sl}
	l.mu.Lock()
	l.sessions[secs] = append(l.sessions[secs], s)
	l.mu.Unlock()
	return sl, nil
}

// renew keeps s's lease alive once and returns the TTL the cluster
// answered with, and then sweeps s. It returns an error matching
// errLeaseGone (and dlock.ErrNotHeld) when the lease is gone, and marks s
// dead then; other errors are classified as opErr does, for an acquisition
// if acquiring.
func (l *Locker) renew(ctx context.Context, s *session, acquiring bool) (time.Duration, error) {
	var start time.Time
	var ka *clientv3.LeaseKeepAliveResponse
	err := attempts(ctx, s.seconds, func(ctx context.Context) (err error) {
		start = time.Now()
		ka, err = l.client.KeepAliveOnce(ctx, s.id)
		return err
	})
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			l.lose(s)
			return 0, fmt.Errorf("%w (%w)", dlock.ErrNotHeld, errLeaseGone)
		}
		return 0, l.opErr(ctx, err, acquiring)
	}
	ttl := time.Duration(ka.TTL) * time.Second
	l.mu.Lock()
	if until := start.Add(ttl); until.After(s.aliveUntil) {
		s.aliveUntil = until
	}
	l.mu.Unlock()
	l.sweep(ctx, s)
	return ttl, nil
}

// attempts runs op, a request that may be sent again (a renewal, a read),
// in attempts of a bounded time: a sixteenth of a lease of secs seconds at
// first (at least 50ms), twice as long after each attempt that ran out, up
// to a quarter of the lease. The client sends each attempt to the next
// member in turn, so a member that takes requests and answers none (frozen,
// or cut off without a reset) costs an attempt, not the lease, and a slow
// cluster still gets the time it needs. It returns op's first error that is
// not an attempt running out, or the last one once ctx ends.
func attempts(ctx context.Context, secs int64, op func(ctx context.Context) error) error {
	lease := time.Duration(secs) * time.Second
	bound := max(lease/16, 50*time.Millisecond)
	for {
		actx, cancel := context.WithTimeout(ctx, bound)
		err := op(actx)
		ranOut := actx.Err() != nil
		cancel()
		if err == nil || !ranOut || ctx.Err() != nil {
			return err
		}
		bound = min(2*bound, max(lease/4, 50*time.Millisecond))
	}
}

// sweep deletes the keys of s's locks whose handle's validity ended
// without a release or an extension (a forgotten lock), each in a
// transaction only if its create revision is still the lock's, and the
// keys of contenders abandoned whose deletion failed (see abandon), and
// then frees their names. Without it, such a key would live as long as the
// shared lease, which the session's other locks and waits keep alive:
// others would wait for it long past its TTL. Every renewal of the lease
// sweeps it, so a forgotten lock is freed at the first renewal after its
// validity ends, or with the lease when no one renews it, within one
// lease TTL of its validity's end either way; a renewal finding nothing
// due sends nothing more. The holder's handle already counts itself lost
// (its validity ran out), so nothing it believes is taken from it. A
// deletion that fails is retried at the next renewal, the name staying
// reserved meanwhile (a new key of that name on this lease would take the
// old one's revision as its own).
func (l *Locker) sweep(ctx context.Context, s *session) {
	l.mu.Lock()
	now := time.Now()
	var due []*slot
	for _, sl := range s.names {
		if sl.doomed {
			due = append(due, sl)
		} else if sl.rev != 0 && sl.extending == 0 && (sl.lost || !sl.validUntil.After(now)) {
			sl.lost = true
			due = append(due, sl)
		}
	}
	l.mu.Unlock()
	for _, sl := range due {
		l.delete(ctx, sl)
	}
}

// lose marks s dead: its lease is gone, and every lock that lives by it
// with it. Their handles are lost at once.
func (l *Locker) lose(s *session) {
	l.mu.Lock()
	s.dead = true
	var handles []*dlock.Lock
	for _, sl := range l.slots() {
		if sl.on == s && sl.lock != nil {
			handles = append(handles, sl.lock)
		}
	}
	l.mu.Unlock()
	for _, h := range handles {
		driver.Lost(h, fmt.Errorf("dlock: %w: the lease of %q expired or was revoked", dlock.ErrLockLost, h.Key()))
	}
}

// slots returns every slot of the Locker's sessions. The Locker's mu must
// be held.
func (l *Locker) slots() []*slot {
	var all []*slot
	for _, pool := range l.sessions {
		for _, s := range pool {
			for _, sl := range s.names {
				all = append(all, sl)
			}
		}
	}
	return all
}

// free takes sl's reservation off its session: its key is known to be
// gone. A later lock of the same name on the session keeps its own.
func (l *Locker) free(sl *slot) {
	l.mu.Lock()
	l.freeLocked(sl)
	l.mu.Unlock()
}

// freeLocked is free with the Locker's mu held.
func (l *Locker) freeLocked(sl *slot) {
	if sl.s.names[sl.name] == sl {
		delete(sl.s.names, sl.name)
	}
}

// validUntil is the validity of a lock whose key was created (or found
// first) by a request sent at start under s's lease: ttl from start, and
// never past the lease's known life, less the drift margin either way.
func (l *Locker) validUntil(s *session, start time.Time, ttl time.Duration) time.Time {
	l.mu.Lock()
	left := s.aliveUntil.Sub(start)
	l.mu.Unlock()
	return bridge.ValidUntil(start, min(ttl, left), l.cfg.DriftFactor)
}

// Close revokes the leases of the Locker's sessions, within 5s: every lock
// it holds is deleted with them, and lost (release them first): by the time
// Close returns, each handle reports so (Held is false, Extend fails with
// dlock.ErrLockLost) and Do has ended its function's context, even when a
// revocation fails; an acquisition whose key Close revoked as it was
// granted fails with dlock.ErrNotAcquired. Waits in progress lose their
// places in the queues and queue again on new leases: the Locker stays
// usable, later acquisitions grant new leases. Close does not close the
// client. Without Close, a lease that no lock uses any more lapses at the
// end of its TTL. It returns the first error of a revocation, matching
// dlock.ErrUnavailable.
func (l *Locker) Close() error {
	l.mu.Lock()
	var all []*session
	var handles []*dlock.Lock
	for _, sl := range l.slots() {
		if sl.on != sl.s {
			all = append(all, sl.on) // a lease of the lock's own
		}
		if sl.lock != nil {
			handles = append(handles, sl.lock)
		}
	}
	for secs, pool := range l.sessions {
		all = append(all, pool...)
		delete(l.sessions, secs)
	}
	for _, s := range all {
		s.dead = true
	}
	l.mu.Unlock()
	// The handles first: nobody else can hold the locks before the leases
	// are revoked.
	for _, h := range handles {
		driver.Lost(h, fmt.Errorf("dlock: %w: Close revoked the lease of %q", dlock.ErrLockLost, h.Key()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var first error
	for _, s := range all {
		if _, err := l.client.Revoke(ctx, s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) && first == nil {
			first = fmt.Errorf("dlock: close: %w", l.opErr(ctx, err, false))
		}
	}
	return first
}
