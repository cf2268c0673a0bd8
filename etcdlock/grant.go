package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

// ReleaseToken releases the lock on key if it still holds token (as
// Lock.Token returns it: the lease id in hex and the key's create
// revision). It returns an error matching dlock.ErrNotHeld when key does
// not hold token.
func (l *Locker) ReleaseToken(ctx context.Context, key, tok string) error {
	g, err := l.tokenGrant(ctx, key, tok, 0)
	if err != nil {
		return err
	}
	if err := g.Release(ctx); err != nil {
		return fmt.Errorf("dlock: release %q: %w", key, err)
	}
	return nil
}

// ExtendToken keeps the lock on key for ttl from now if it still holds
// token (see ReleaseToken), as Lock.Extend does. It returns an error
// matching dlock.ErrNotHeld when key does not hold token.
func (l *Locker) ExtendToken(ctx context.Context, key, tok string, ttl time.Duration) error {
	g, err := l.tokenGrant(ctx, key, tok, leaseSeconds(ttl))
	if err != nil {
		return err
	}
	if _, err := g.Extend(ctx, ttl); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", key, err)
	}
	return nil
}

// tokenGrant returns the grant of the lock on key that token names: its
// slot when it is one of the Locker's locks, else a slot of its own on the
// token's lease, of secs seconds as far as renewals are concerned.
func (l *Locker) tokenGrant(ctx context.Context, key, tok string, secs int64) (*grant, error) {
	if err := l.cfg.CheckToken(ctx, key, tok); err != nil {
		return nil, err
	}
	lease, rev, ok := parseToken(tok)
	if !ok {
		return nil, bridge.Invalidf("token %q: not an etcd lease id in hex, a dash and a revision", tok)
	}
	// A lock of this Locker's is extended and released through its slot,
	// as its handle would: sweep must see the extension.
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pool := range l.sessions {
		for _, s := range pool {
			if sl := s.names[key]; s.id == lease && sl != nil && sl.rev == rev {
				return &grant{l: l, slot: sl}, nil
			}
		}
	}
	s := &session{id: lease, seconds: secs}
	return &grant{l: l, slot: &slot{s: s, on: s, name: key, key: l.queue(key) + token(lease), rev: rev}}, nil
}

// grant is one held lock's connection to the cluster: its slot (one of no
// session's, for a lock of another Locker known by its token only).
type grant struct {
	l    *Locker
	slot *slot
}

// Extend keeps the lock for ttl: it renews the lease the key lives by
// (and with it every lock of the session on it), checks that the key is
// still this lock's, and when ttl is longer than that lease's TTL, moves
// the key under a lease of its own (see move).
func (g *grant) Extend(ctx context.Context, ttl time.Duration) (time.Time, error) {
	l := g.l
	if err := l.cfg.CheckTTL(ttl); err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	sl := g.slot
	on, dead, lost := sl.on, sl.on.dead, sl.lost
	if !dead && !lost {
		sl.extending++ // sweep leaves it alone until we are done
	}
	l.mu.Unlock()
	switch {
	case dead:
		return time.Time{}, fmt.Errorf("%w (the session's lease expired or was revoked)", dlock.ErrNotHeld)
	case lost:
		return time.Time{}, fmt.Errorf("%w (its validity ended unextended: the key was deleted)", dlock.ErrNotHeld)
	}
	until, on, err := g.extend(ctx, on, ttl)
	l.mu.Lock()
	sl.extending--
	if err == nil {
		sl.on = on
		if until.After(sl.validUntil) {
			sl.validUntil = until
		}
	}
	l.mu.Unlock()
	return until, err
}

// extend renews on's lease, the one g's key lives by as far as g knows,
// and reads the key: it must still have the lock's create revision. A key
// found under another lease (moved by an extension of another process) has
// that lease renewed instead. It returns the new validity and the session
// the key lives by.
func (g *grant) extend(ctx context.Context, on *session, ttl time.Duration) (time.Time, *session, error) {
	l := g.l
	for moves := 0; ; moves++ {
		start := time.Now()
		leaseTTL, renewErr := l.renew(ctx, on, false)
		if renewErr != nil && (!errors.Is(renewErr, errLeaseGone) || g.registered()) {
			return time.Time{}, nil, renewErr
		}
		kv, err := g.read(ctx, on.seconds)
		switch {
		case err != nil:
			return time.Time{}, nil, err
		case kv == nil:
			return time.Time{}, nil, fmt.Errorf("%w (the key was deleted)", dlock.ErrNotHeld)
		case clientv3.LeaseID(kv.Lease) != on.id && moves < 3:
			on = &session{id: clientv3.LeaseID(kv.Lease), seconds: leaseSeconds(ttl)}
			continue
		case renewErr != nil:
			return time.Time{}, nil, renewErr
		case ttl > leaseTTL:
			until, to, err := g.move(ctx, on, ttl, leaseTTL)
			if errors.Is(err, errMoved) && moves < 3 {
				continue
			}
			return until, to, err
		}
		return bridge.ValidUntil(start, min(ttl, leaseTTL), l.cfg.DriftFactor), on, nil
	}
}

// errMoved: the key's lease changed under a move, which must read it again.
var errMoved = errors.New("the key moved to another lease")

// registered reports whether g's slot is one of the Locker's, not made up
// from a token.
func (g *grant) registered() bool {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	return g.slot.s.names[g.slot.name] == g.slot
}

// read reads g's key, in attempts bounded for a lease of secs seconds; it
// returns nil when the key is gone or is not the lock's any more.
func (g *grant) read(ctx context.Context, secs int64) (*mvccpb.KeyValue, error) {
	var resp *clientv3.GetResponse
	err := attempts(ctx, secs, func(ctx context.Context) (err error) {
		resp, err = g.l.client.Get(ctx, g.slot.key)
		return err
	})
	if err != nil {
		return nil, g.l.opErr(ctx, err, false)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != g.slot.rev {
		return nil, nil
	}
	return resp.Kvs[0], nil
}

// move puts g's key, which lives by from's lease of fromTTL, under a new
// lease of ttl of its own, for an extension beyond fromTTL: an etcd lease
// keeps the TTL it was granted with, and the session's lease is shared.
// The put keeps the key's create revision, so the fence and the queue are
// unchanged for dlock, concurrency.Mutex and `etcdctl lock` alike; it is
// made only if the key still lives by from, so that no other move is
// undone. The new lease lives at least as long as any validity counted on
// from before the move: it is granted before the move with a TTL at least
// a second longer, and renewed once more after it when the move took that
// second.
func (g *grant) move(ctx context.Context, from *session, ttl, fromTTL time.Duration) (time.Time, *session, error) {
	l := g.l
	secs := leaseSeconds(ttl)
	start := time.Now()
	resp, err := l.client.Grant(ctx, secs)
	if err != nil {
		return time.Time{}, nil, l.opErr(ctx, err, false)
	}
	toTTL := time.Duration(resp.TTL) * time.Second
	to := &session{id: resp.ID, seconds: secs, aliveUntil: start.Add(toTTL)}
	ours := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(g.slot.key), "=", g.slot.rev),
		clientv3.Compare(clientv3.LeaseValue(g.slot.key), "=", from.id)}
	put := clientv3.OpPut(g.slot.key, "", clientv3.WithLease(to.id), clientv3.WithIgnoreValue())
	tresp, err := l.client.Txn(ctx).If(ours...).Then(put).Commit()
	if err != nil {
		// The outcome is unknown: the key may live by to now, which then
		// lives out its TTL; the next Extend finds it.
		return time.Time{}, nil, l.opErr(ctx, err, false)
	}
	if !tresp.Succeeded {
		_, _ = l.client.Revoke(ctx, to.id)
		return time.Time{}, nil, errMoved
	}
	if time.Since(start) >= toTTL-fromTTL {
		_, _ = l.renew(ctx, to, false)
	}
	return bridge.ValidUntil(start, min(ttl, toTTL), l.cfg.DriftFactor), to, nil
}

// Release deletes the key if it is still this lock's (its create revision
// is the lock's): one transaction, one Raft commit. The session's lease
// lives on for its other locks and the next ones; a lease the key was
// moved under to extend it (see move) is revoked.
func (g *grant) Release(ctx context.Context) error {
	l, sl := g.l, g.slot
	ours := clientv3.Compare(clientv3.CreateRevision(sl.key), "=", sl.rev)
	resp, err := l.client.Txn(ctx).If(ours).Then(clientv3.OpDelete(sl.key, clientv3.WithPrevKV())).Commit()
	if err != nil {
		return l.opErr(ctx, err, false) // outcome unknown: the name stays reserved
	}
	l.free(sl)
	if !resp.Succeeded {
		return fmt.Errorf("%w (the lease expired or another owner holds the key)", dlock.ErrNotHeld)
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) == 1 && clientv3.LeaseID(prev[0].Lease) != sl.s.id {
		_, _ = l.client.Revoke(ctx, clientv3.LeaseID(prev[0].Lease)) // nothing else lives by it
	}
	return nil
}

// token is how a lease id is written in a key: lower case hex, as
// concurrency.Mutex writes it.
func token(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// lockToken is a lock's token: the lease in hex whose id names its key, a
// dash and its key's create revision, so that locks sharing a lease have
// tokens of their own.
func lockToken(id clientv3.LeaseID, rev int64) string {
	return token(id) + "-" + strconv.FormatInt(rev, 10)
}

// parseToken is lockToken's inverse.
func parseToken(tok string) (clientv3.LeaseID, int64, bool) {
	lh, rh, ok := strings.Cut(tok, "-")
	if !ok {
		return 0, 0, false
	}
	id, ok := parseLease(lh)
	if !ok {
		return 0, 0, false
	}
	rev, err := strconv.ParseInt(rh, 10, 64)
	if err != nil || rev <= 0 || strconv.FormatInt(rev, 10) != rh {
		return 0, 0, false
	}
	return id, rev, true
}

// parseLease is token's inverse.
func parseLease(h string) (clientv3.LeaseID, bool) {
	id, err := strconv.ParseUint(h, 16, 63)
	if err != nil || id == 0 || token(clientv3.LeaseID(id)) != h {
		return 0, false
	}
	return clientv3.LeaseID(id), true
}
