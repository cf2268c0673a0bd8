package wake

import "time"

// Retry is a waiting Locker's own retry for one key, when no announcement
// will come: one timer, due at the earliest time asked for (a deferred
// turn, or the expiry of the lock it waits behind). Its methods are called
// with the owner's mutex held; the timer's function takes that mutex and
// calls Take, which tells a live retry from one cancelled meanwhile.
type Retry struct {
	timer *time.Timer
	due   time.Time // zero when none is pending
}

// At makes fire run at due, unless a retry is due sooner already. fire is
// bound when the timer is first made, so a Retry serves one owner.
func (r *Retry) At(due time.Time, fire func()) {
	if !r.due.IsZero() && !due.Before(r.due) {
		return
	}
	r.due = due
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Until(due), fire)
	} else {
		r.timer.Reset(time.Until(due))
	}
}

// Take reports whether a retry was pending, and clears it.
func (r *Retry) Take() bool {
	pending := !r.due.IsZero()
	r.due = time.Time{}
	return pending
}

// Cancel stops a pending retry.
func (r *Retry) Cancel() {
	if r.Take() {
		r.timer.Stop()
	}
}

// AfterExpiry returns how long a waiter that read a lock key's PTTL of ms
// waits before retrying by itself, when nobody will announce the key's
// expiry: just past it, beyond Redis's 1ms expiry precision.
func AfterExpiry(ms int64) time.Duration {
	return time.Duration(ms)*time.Millisecond + 2*time.Millisecond
}
