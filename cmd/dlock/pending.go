package main

import (
	"context"
	"errors"
	"io"
)

// Placeholders until the redlock and pglock packages land.

func (a *app) openRedlock(b *backend) (*backend, error) {
	b.close()
	return nil, usagef("several --redis URLs (Redlock) are not supported yet")
}

func (a *app) openPostgres(ctx context.Context, dsn string) (*backend, error) {
	return nil, usagef("--postgres is not supported yet")
}

// runDemo waits for internal/demo to compile in the shared checkout.
func runDemo(ctx context.Context, w io.Writer, urls []string) error {
	return errors.New("the demo is not available yet")
}
