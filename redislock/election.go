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

// termRereads is how many times ReadTerm reads again, a millisecond apart,
// a key held without a record: another client's read can come between the
// grant and its record, in the same round trip.
const termRereads = 3

// ReadTerm implements driver.TermReader: who holds the lock on key, in one
// transaction (MULTI/EXEC) that reads the key, its fence counter and its
// holder record, which a grant made with an identity (driver.Identity: an
// election's candidate) writes as WithHolderInfo does, identity included.
// Fence is the key's fence counter, which the grant set to the lock's
// fence; Leader (the identity, else host:pid) and Since come from the
// record, if its token is the key's. A holder without one (a bare
// TryAcquire, another client) is reported with its fence and no Leader. It
// returns an error matching dlock.ErrUnavailable when the server could not
// be reached.
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
