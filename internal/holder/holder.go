// Package holder builds the holder record that the backends' WithHolderInfo
// options publish beside (Redis) or as the value of (etcd) a lock: the JSON
// object {"host", "pid", "service", "since"} that Inspect reads. The record
// is informational only: the lock's key and token decide who holds it.
package holder

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Head returns this process's record up to the value of "since", which
// Record completes. service may be empty; otherwise it must be a valid key
// (driver.CheckKey).
func Head(service string) (string, error) {
	if service != "" {
		if err := driver.CheckKey(service); err != nil {
			return "", err
		}
	}
	host, _ := os.Hostname()
	h, _ := json.Marshal(host)
	s, _ := json.Marshal(service)
	return `{"host":` + string(h) + `,"pid":` + strconv.Itoa(os.Getpid()) + `,"service":` + string(s) + `,"since":"`, nil
}

// Record returns the record of a lock granted at since.
func Record(head string, since time.Time) string {
	return head + since.UTC().Format(time.RFC3339Nano) + `"}`
}

// defaultHead is this process's record head without a service, for
// grants that publish an identity without WithHolderInfo.
var defaultHead = sync.OnceValue(func() string {
	h, _ := Head("")
	return h
})

// Term returns the record of a grant made at since that an election's
// candidate publishes (Redis): the holder record (head, or this process's
// when head is "") with the candidate's identity, the token of the grant
// it belongs to, so that a reader can tell it from a record left by an
// earlier holder, and the grant's fence when known (0: left out).
func Term(head string, since time.Time, identity, token string, fence uint64) string {
	if head == "" {
		head = defaultHead()
	}
	id, _ := json.Marshal(identity)
	tok, _ := json.Marshal(token)
	s := head + since.UTC().Format(time.RFC3339Nano) + `","identity":` + string(id) + `,"token":` + string(tok)
	if fence > 0 {
		s += `,"fence":` + strconv.FormatUint(fence, 10)
	}
	return s + "}"
}

// Grant returns the record that a grant made at since with token
// publishes beside its key (Redis): the term record when the attempt
// carries an identity (an election's candidate), else with a head
// (WithHolderInfo) the holder record, else "" (nothing).
func Grant(head string, since time.Time, identity, token string) string {
	switch {
	case identity != "":
		return Term(head, since, identity, token, 0)
	case head != "":
		return Record(head, since)
	}
	return ""
}
