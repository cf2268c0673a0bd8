package redislock

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/rinspect"
)

var _ driver.TermReader = (*Locker)(nil)

// termRereads is how many times ReadTerm reads again a key held without a
// record of its grant, a millisecond apart: the record is written right
// after the grant, in the same round trip, but another client's read can
// come in between.
const termRereads = 3

// ReadTerm implements driver.TermReader: who holds the lock on key, in one
// transaction (MULTI/EXEC) that reads the key, its fence counter and its
// holder record. A grant made with an identity (driver.Identity: an
// election's candidate) publishes it in its holder record,
// "dlock:holder:{key}", as a grant with WithHolderInfo publishes its
// host:pid: written in the grant's round trip with the grant's token (so
// that a record an earlier holder left behind is not taken for the current
// one's), kept with the lock's TTL and deleted with the release. Fence is
// the key's fence counter, which the grant set to the lock's fence; Leader
// (the identity, else host:pid) and Since come from the record. A holder
// without one (a bare TryAcquire, another client) is reported with its
// fence and no Leader. It returns an error matching dlock.ErrUnavailable
// when the server could not be reached.
func (l *Locker) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	if err := l.cfg.CheckRead(ctx, key); err != nil {
		return dlock.Term{}, err
	}
	return backend.Reread(ctx, termRereads, func() (dlock.Term, bool, error) {
		nt, err := rinspect.ReadTerm(ctx, l.client, l.cfg.Prefix+key)
		switch {
		case err != nil:
			return dlock.Term{}, false, fmt.Errorf("dlock: leader %q: %w", key, l.opErr(ctx, err, false))
		case nt.Token == "":
			return dlock.Term{}, false, nil
		case nt.Record != nil:
			return dlock.Term{Led: true, Leader: nt.Record.Leader(), Fence: nt.Counter, Since: nt.Record.Since}, false, nil
		}
		return dlock.Term{Led: true, Fence: nt.Counter}, true, nil
	})
}
