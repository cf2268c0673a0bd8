package dlock

import "crypto/rand"

// NewToken returns a fresh random lock token: 128 bits from crypto/rand,
// encoded as 26 base32 characters. Backends use it as the value of a lock
// key so that only the holder can extend or release it.
func NewToken() string { return rand.Text() }
