package redlock

import (
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
)

// NodeResult is what one node answered to one Redlock operation.
type NodeResult struct {
	Node string // the node's address
	OK   bool   // granted, extended or released
	Err  error  // why not: busy, a server error, no reply; nil when OK
}

// QuorumError reports an operation that did not reach a majority of nodes
// (or, for an acquisition, reached it without validity left), with every
// node's answer. Its Unwrap returns the matching dlock sentinel first
// (dlock.ErrNotAcquired when the lock was busy or the vote split,
// dlock.ErrUnavailable when fewer than a majority of nodes answered at all,
// dlock.ErrMisconfigured when so many refused for good, a wrong password
// say, that no majority is left, dlock.ErrNotHeld for an extension or
// release that a majority answered without the key), then a
// *dlock.NodeError for every node that failed.
type QuorumError struct {
	Op     string // "acquire", "extend", "release", "set limit" or "leader"
	Got    int    // nodes that granted (extended, released)
	Need   int    // the majority: N/2+1
	Reason string // what decided the outcome, in words
	Nodes  []NodeResult

	sentinel error
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s on %d of %d nodes, need %d", e.sentinel, e.Op, e.Got, len(e.Nodes), e.Need)
	if e.Reason != "" {
		b.WriteString(" (" + e.Reason + ")")
	}
	sep := ": "
	for _, n := range e.Nodes {
		if n.Err != nil {
			fmt.Fprintf(&b, "%snode %s: %v", sep, n.Node, n.Err)
			sep = "; "
		}
	}
	return b.String()
}

// Unwrap returns the sentinel and the per-node errors.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.sentinel}
	for _, n := range e.Nodes {
		if n.Err != nil {
			errs = append(errs, &dlock.NodeError{Node: n.Node, Err: n.Err})
		}
	}
	return errs
}
