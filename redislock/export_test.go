package redislock

import "context"

// Features exposes which native commands the Locker chose, for tests.
func (l *Locker) Features(ctx context.Context) (del, set bool) { return l.features(ctx) }
