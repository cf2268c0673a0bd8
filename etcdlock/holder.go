package etcdlock

import (
	"encoding/json"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/holder"
)

// WithHolderInfo makes the Locker publish who holds each of its locks, for
// Inspect and `dlock inspect`: a JSON record {"host", "pid", "service",
// "since"} as the value of the lock's queue key, written by the put that
// creates the key (no request of its own). "since" is when the key was put:
// the grant's time for a lock taken at once, the time it joined the queue
// for one that waited. The record is informational only: the key's create
// revision and lease decide who holds the lock. concurrency.Mutex and
// `etcdctl lock` put an empty value and never read it, so they share the
// queue with such keys unchanged. service names the program (it may be
// empty). An attempt with an identity (dlock.WithIdentity, an election's
// candidate) puts its identity instead, as `etcdctl elect` puts its
// proposal. The default is off: the value is empty, as a Mutex's.
func WithHolderInfo(service string) Option {
	return func(l *Locker) error { return l.cfg.SetHolderInfo(service) }
}

// value is the value of a key put now for an attempt with identity id
// (driver.Identity): id itself when it is not empty, as `etcdctl elect`
// puts its proposal, else holderValue.
func (l *Locker) value(id string) string {
	if id != "" {
		return id
	}
	return l.holderValue()
}

// holderValue is the value of a key put now: the holder record with
// WithHolderInfo, empty without.
func (l *Locker) holderValue() string {
	if l.cfg.HolderHead == "" {
		return ""
	}
	return holder.Record(l.cfg.HolderHead, time.Now())
}

// holderOf fills info's holder fields from a key's value: a holder
// record's, or an election's identity (or etcdctl's proposal) as the
// Service.
func holderOf(info *dlock.LockInfo, value []byte) {
	if len(value) > 0 && value[0] != '{' {
		info.Service = string(value)
	}
	if len(value) == 0 || value[0] != '{' {
		return
	}
	var rec struct {
		Host    string    `json:"host"`
		PID     int       `json:"pid"`
		Service string    `json:"service"`
		Since   time.Time `json:"since"`
	}
	if json.Unmarshal(value, &rec) == nil {
		info.Host, info.PID, info.Service, info.Since = rec.Host, rec.PID, rec.Service, rec.Since
	}
}
