package torture

import "time"

// Event is one line a worker writes: something it did or saw, stamped with
// the machine's wall clock in nanoseconds (every process reads the same
// clock, so events of different workers can be compared).
type Event struct {
	T   int64  `json:"t"`            // when it happened; for an operation, when it returned
	T0  int64  `json:"t0,omitempty"` // an operation: when it was called
	W   int    `json:"w"`            // worker
	Ev  string `json:"ev"`           // see the ev* constants
	Key string `json:"key,omitempty"`

	Tok   string `json:"tok,omitempty"`   // the lock's token
	Fence uint64 `json:"fence,omitempty"` // the lock's fence

	// Oracle: Seq is the oracle's sequence number of an enter or exit;
	// Prev what the oracle's inside marker held before (enter) or when
	// deleted (exit).
	Seq  int64  `json:"seq,omitempty"`
	Prev string `json:"prev,omitempty"`

	// enter and exit: Valid is the lock's validity deadline (wall clock).
	// exit: Lost is when the function's context ended (0: it had not),
	// Cause why ("lost": ErrLockLost; "stop": the run ended), Held whether
	// the handle still said held just before the exit.
	Valid int64  `json:"valid,omitempty"`
	Lost  int64  `json:"lost,omitempty"`
	Cause string `json:"cause,omitempty"`
	Held  bool   `json:"held,omitempty"`

	// read and write: Out is the outcome (outOK, outStale, outTie,
	// outUnknown) and Val the value read or written.
	Out string `json:"out,omitempty"`
	Val string `json:"val,omitempty"`
	// call: Op is the operation called, evRead or evWrite.
	Op string `json:"op,omitempty"`

	// done: Err is the sentinel Do's error matched ("" for success), Msg
	// the error itself.
	Err string `json:"err,omitempty"`
	Msg string `json:"msg,omitempty"`
}

// Event kinds.
const (
	evReady = "ready" // the worker is set up; the run starts when all are
	evWait  = "wait"  // Do called for Key
	evEnter = "enter" // the function started: the lock is held (T is the grant)
	evRead  = "read"  // a fenced read of the register (registers the fence)
	evWrite = "write" // a fenced write of the register
	evCall  = "call"  // a read or write is about to be sent (a worker killed before its answer leaves only this)
	evExit  = "exit"  // the function is about to return
	evDone  = "done"  // Do returned
)

// Outcomes of a fenced operation.
const (
	outOK      = "ok"
	outStale   = "stale"   // refused: a higher fence was seen
	outTie     = "tie"     // refused: the same fence, set by another holder
	outUnknown = "unknown" // no answer: it may or may not have landed
)

func now() int64 { return time.Now().UnixNano() }
