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

// termRereads is how many times ReadTerm reads again, 1ms apart, a key held
// without a record: a read can come between a grant and its record.
const termRereads = 3

// ReadTerm implements driver.TermReader in one MULTI/EXEC that reads the
// key, its fence counter (the grant's fence) and its holder record, which
// a grant with an identity (driver.Identity) writes as WithHolderInfo
// does. Leader (the identity, else host:pid) and Since come from a record
// whose token is the key's; a holder without one is reported with its
// fence and no Leader.
func (l *Locker) ReadTerm(ctx context.Context, key string) (dlock.Term, error) {
	if err := l.cfg.CheckRead(ctx, key); err != nil {
		return dlock.Term{}, err
	}
	return backend.Reread(ctx, termRereads, func() (dlock.Term, bool, error) {
		nt, err := rinspect.ReadTerm(ctx, l.node.Client, l.cfg.Prefix+key)
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
