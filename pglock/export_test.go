package pglock

import (
	"cmp"
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TryAcquireGrant is TryAcquire without the handle, so that tests see what
// the grant itself returns, apart from dlock.Lock's wrapping.
func (l *Locker) TryAcquireGrant(ctx context.Context, key string, ttl time.Duration) (g driver.Grant, fence uint64, validUntil time.Time, err error) {
	if err := cmp.Or(l.cfg.Check(ctx, key, ttl), l.checkTTL(ttl)); err != nil {
		return nil, 0, time.Time{}, err
	}
	conn, err := l.pin(ctx, key)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	gr, validUntil, err := l.grantOn(ctx, conn, key, HashKey(key), "", ttl)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	return gr, gr.fence, validUntil, nil
}

// WaitKey is the advisory key a Locker's release listener holds.
const WaitKey = waitKey
