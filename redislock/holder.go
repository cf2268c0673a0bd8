package redislock

// WithHolderInfo makes the Locker publish who holds each of its locks, for
// Inspect, `dlock inspect` and dlock.Leader: a JSON record {"host", "pid",
// "service", "since", "token"} (the grant's token, so that a reader can
// tell it from a record an earlier holder left behind) in the key
// "dlock:holder:{key}", written in the round trip of a grant of this
// Locker's, given the lock's TTL at each extension, and deleted with the
// release where it is still this lock's. The record is informational only:
// the lock key and its token decide who holds the lock. service names the
// program (it may be empty). The default is off. Its cost: one more script
// in each round trip of the lock (bench/RESULTS.md, Hook).
func WithHolderInfo(service string) Option {
	return func(l *Locker) error { return l.cfg.SetHolderInfo(service) }
}
