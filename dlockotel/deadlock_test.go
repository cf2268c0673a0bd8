package dlockotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
)

// The SDK's meter provider reads the span from the context of every
// measurement (its default exemplar filter), so the Observer looks into
// the context of each event: with an fn that extends or releases its own
// lock, that context is Do's own.
func TestSDKMeterWithOwnRelease(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	obs, err := dlockotel.New(dlockotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"extend", "release"} {
		t.Run(op, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				done <- dlock.Do(context.Background(), newMem(obs.Observe), "k", time.Minute, func(ctx context.Context) error {
					lock := dlock.LockFromContext(ctx)
					if op == "extend" {
						return lock.Extend(ctx, time.Minute)
					}
					return lock.Release(ctx)
				})
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Do: no return after 5s: the observer deadlocked")
			}
		})
	}
}
