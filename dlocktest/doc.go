// Package dlocktest is an in-memory dlock.Locker for the unit tests of code
// that uses locks: no server to run, and what such code must handle on cue.
//
//	locker := dlocktest.New()
//	job := NewJob(locker) // the code under test takes a dlock.Locker
//
// A Locker keeps its locks in memory, as one lock server would: it follows
// the whole contract of dlock.Locker (the conformance suite of package
// locktest runs on it), so dlock.Acquire, dlock.Do and the *dlock.Lock
// handles behave as they do on the real backends. Each TryAcquire is
// another owner, as a separate process would be; fences start at 1 for
// each key and grow by one with each grant of it; a release wakes the
// dlock.Acquire and dlock.Do waiting for the key; events go to the
// observers given with WithObserver. Elections (dlock.Lead, Leader,
// Observe, Campaign) work on it as on the backends: it reports the
// leader's identity and term (ReadTerm).
//
// And the test drives the cases that are hard to produce with a real
// server:
//
//   - Hold makes a key busy: another owner holds it until its release or
//     its TTL, so that the code under test finds it taken.
//   - Lose takes a held lock away now: its holder's handle is no longer
//     held, Extend returns an error matching dlock.ErrLockLost, and the
//     context of the dlock.Do holding it ends with that cause. WaitHeld
//     waits until the code under test holds a key, so the test knows when.
//   - FailNext makes the next requests fail, and Fail all of them until
//     Heal, with the error given (dlock.ErrUnavailable by default: the
//     backend could not be reached).
//   - Advance moves the Locker's clock forward at once, as if the process
//     had been paused: TTLs run out without the test sleeping.
//
// # Time
//
// A Locker's clock is the machine's, plus the jumps Advance made. Locks
// are measured on it: on the server side (when a key's TTL runs out) and
// on the handle's (ValidUntil, Remaining, Held, and the moment dlock.Do
// declares the lock lost). Waits still take real time: dlock.Acquire's
// retry delays and dlock.Do's extension schedule run on the machine's
// timers, and a jump wakes them to look at the new time (a waiter retries
// when a jump freed its key; Do extends at once when a jump left less
// validity than its threshold, and ends its function's context when the
// jump went past the validity).
//
// A test that wants those timers on a controlled clock too runs in a
// testing/synctest bubble (Go 1.25): time.Sleep(time.Hour) there takes
// no real time, and the Locker, created inside the bubble, follows it.
//
// Where a test wants Redis's semantics rather than a model of the
// contract, package redislock runs on miniredis, an in-process imitation
// of Redis (see docs/testing-your-code.md in the repository).
package dlocktest
