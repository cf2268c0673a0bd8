package locktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

type tryOnly struct{}

func (tryOnly) TryAcquire(context.Context, string, time.Duration) (*dlock.Lock, error) {
	return nil, dlock.ErrNotAcquired
}

// waitsItself is a Locker with a second spelling of dlock.Acquire, which
// might queue, fail fast or apply defaults of its own.
type waitsItself struct{ tryOnly }

func (l waitsItself) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...dlock.Option) (*dlock.Lock, error) {
	return dlock.Acquire(ctx, l, key, ttl, append([]dlock.Option{dlock.WithRetryCount(3)}, opts...)...)
}

type doesItself struct{ tryOnly }

func (doesItself) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(context.Context) error) error {
	return nil
}

// The suite's OneWayToWait check refuses a Locker that waits in methods of
// its own, and passes one that leaves waiting to dlock.Acquire.
func TestOwnWait(t *testing.T) {
	if err := ownWait(tryOnly{}); err != nil {
		t.Errorf("a Locker with TryAcquire only: %v", err)
	}
	for _, l := range []dlock.Locker{waitsItself{}, &waitsItself{}, doesItself{}} {
		err := ownWait(l)
		if err == nil {
			t.Errorf("%T: no error for its own waiting method", l)
			continue
		}
		if !strings.Contains(err.Error(), "Acquire") && !strings.Contains(err.Error(), "DoMulti") {
			t.Errorf("%T: %v, want the method named", l, err)
		}
	}
}
