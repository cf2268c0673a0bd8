package rnode

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/keys"
)

// WriteHolders writes rec beside each of lockKeys for ttl, each only while
// its key holds token, in one script (an election's term record, once its
// fence is known: the grant wrote the first record).
func (n *Node) WriteHolders(ctx context.Context, lockKeys []string, token, rec string, ttl time.Duration) error {
	ks := append(make([]string, 0, 2*len(lockKeys)), lockKeys...)
	for _, k := range lockKeys {
		ks = append(ks, keys.Holder(k))
	}
	return run(ctx, n.batch, n.Client, holderScript, nil, ks, []any{token, rec, bridge.Milliseconds(ttl)}).Err()
}
