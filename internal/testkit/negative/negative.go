// Package negative lets dlock torture break a backend on purpose, for its
// negative controls: a checker that never reports a broken lock proves
// nothing. The backends set these hooks from an init function in a small
// file of their own (negative.go); nothing outside this module can reach
// them, and no exported option of a backend does the same, so no user can
// switch a safety rule off by mistake.
//
// Each hook takes the backend's *Locker as any (this package cannot import
// the backends, which import it) and panics on anything else: it is only
// ever called by the torture worker on a Locker it just built.
package negative

var (
	// RedlockQuorum sets a redlock.Locker's quorum to q, below N/2+1 too.
	RedlockQuorum func(locker any, q int)
	// RedlockDriftFactor and RedislockDriftFactor set the Locker's drift
	// factor unchecked, negative too: -2ms/ttl cancels the 2ms constant of
	// the drift margin (bridge.Drift), so validity becomes send time + ttl with no margin.
	RedlockDriftFactor   func(locker any, f float64)
	RedislockDriftFactor func(locker any, f float64)
)
