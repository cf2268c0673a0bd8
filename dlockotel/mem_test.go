package dlockotel_test

import (
	"context"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// newMem returns an in-memory Locker whose events go to observers: for the
// span tests and the benchmarks, which are about the events, not the
// backend.
func newMem(observers ...func(context.Context, dlock.Event)) *dlocktest.Locker {
	opts := make([]dlocktest.Option, 0, len(observers))
	for _, o := range observers {
		opts = append(opts, dlocktest.WithObserver(o))
	}
	return dlocktest.New(opts...)
}
