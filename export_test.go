package dlock

// Backoff is the wait after the n-th unreachable attempt in a row.
var Backoff = backoff
