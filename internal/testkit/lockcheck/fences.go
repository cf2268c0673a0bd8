package lockcheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// FenceHistory runs n successive holders of key with l, each taking the
// lock, then releasing it, and fails unless every fence is above the one
// before. Before holder i it runs faults[i] (a restart, a failover...), and
// it retries an attempt that a fault made fail (ErrUnavailable, or a lock
// still held by a holder whose release the fault swallowed) for up to 10s.
// It returns the fences.
func FenceHistory(t *testing.T, l dlock.Locker, key string, n int, faults map[int]func()) []uint64 {
	t.Helper()
	fences := make([]uint64, 0, n)
	for i := range n {
		if f := faults[i]; f != nil {
			f()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			lock, err := l.TryAcquire(c, key, 2*time.Second)
			if err == nil {
				fences = append(fences, lock.Fence())
				lock.Release(c) // a release a fault swallowed leaves a key to expire
				cancel()
				break
			}
			cancel()
			if errors.Is(err, dlock.ErrInvalid) || time.Now().After(deadline) {
				t.Fatalf("holder %d of %d: %v", i, n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if k := len(fences) - 1; k > 0 && fences[k] <= fences[k-1] {
			t.Fatalf("holder %d's fence %d is not above holder %d's %d", i, fences[k], i-1, fences[k-1])
		}
	}
	return fences
}
