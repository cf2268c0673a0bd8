// Package holder builds the holder record that the backends' WithHolderInfo
// options publish beside (Redis) or as the value of (etcd) a lock: the JSON
// object {"host", "pid", "service", "since"} that Inspect reads. The record
// is informational only: the lock's key and token decide who holds it.
package holder

import (
	"encoding/json"
	"os"
	"strconv"
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
