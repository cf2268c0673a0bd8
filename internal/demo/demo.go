// Package demo implements the narrated scenarios of `dlock demo`.
package demo

import (
	"context"
	"io"
)

// Options configures Run.
type Options struct {
	// RedisURLs are the servers to use; empty starts temporary ones.
	RedisURLs []string
}

// Run runs the narrated scenarios, writing to w.
func Run(ctx context.Context, w io.Writer, opts Options) error {
	_, _ = ctx, w
	return nil
}
