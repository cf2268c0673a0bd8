// Package holder builds the holder record, {"host", "pid", "service",
// "since"}, that WithHolderInfo publishes beside (Redis) or as the value of
// (etcd) a lock, for Inspect. Only the key and token decide who holds it.
package holder

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"time"
)

// Head returns this process's record up to the value of "since", which
// Record completes. service may be empty.
func Head(service string) string {
	host, _ := os.Hostname()
	h, _ := json.Marshal(host)
	s, _ := json.Marshal(service)
	return `{"host":` + string(h) + `,"pid":` + strconv.Itoa(os.Getpid()) + `,"service":` + string(s) + `,"since":"`
}

// Record returns the record of a lock granted at since.
func Record(head string, since time.Time) string {
	return head + since.UTC().Format(time.RFC3339Nano) + `"}`
}

// defaultHead is for grants that publish an identity without WithHolderInfo.
var defaultHead = sync.OnceValue(func() string { return Head("") })

// Term returns the record of a grant made at since that a Redis backend
// publishes beside its key: the holder record (head, or this process's
// when ""), the identity (if any), the fence (if known), and the token,
// which a reader checks against the lock key's so as not to take an
// earlier holder's record for the current one's. It is "" for a grant
// with neither an identity nor a head: it publishes nothing.
func Term(head string, since time.Time, identity, token string, fence uint64) string {
	switch {
	case head == "" && identity == "":
		return ""
	case head == "":
		head = defaultHead()
	}
	s := head + since.UTC().Format(time.RFC3339Nano) + `"`
	if identity != "" {
		id, _ := json.Marshal(identity)
		s += `,"identity":` + string(id)
	}
	tok, _ := json.Marshal(token)
	s += `,"token":` + string(tok)
	if fence > 0 {
		s += `,"fence":` + strconv.FormatUint(fence, 10)
	}
	return s + "}"
}
