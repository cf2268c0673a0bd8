package dlock

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/dlock-go/dlock/internal/bridge"
)

// An Inspector is a Locker that can list the locks held on its servers,
// for operators' questions: who holds it, for how long, how many wait.
// Every backend of this repository implements it.
type Inspector interface {
	// Inspect lists the held locks whose keys match pattern (a glob as
	// Redis reads one: "*", "billing:*", "job-?", "[ab]*"; "" is "*"), at
	// most limit of them (0: a backend's default bound), without blocking
	// the servers (Redis: SCAN, never KEYS). A lock taken or released
	// during the listing may be missed or reported. A negative limit or a
	// pattern with an unclosed [ is refused with an error matching
	// ErrInvalid.
	Inspect(ctx context.Context, pattern string, limit int) ([]LockInfo, error)
}

// LockInfo is one held lock as its backend sees it. Fields a backend
// cannot know are zero.
//
// Its JSON form is the one `dlock inspect --json` prints for each lock:
//
//	{"key":"billing","node":"10.0.0.5:6379","ttl_ms":28500,"fence":42,
//	 "holder":{"host":"web-1","pid":4242,"service":"api","since":"2026-12-01T10:00:00Z"},
//	 "waiting":0,"majority":true}
//
// "ttl_ms" is TTL in whole milliseconds (rounded up; 0: no TTL); "fence" is
// null when Fence is 0, "holder" null when the holder is unknown (Host,
// PID, Service and Since all zero); "service" and "since" are left out when
// zero; "limit", a permit's Limit, is left out for a lock. The token is
// left out (see MarshalJSONWithToken). Decoding accepts that form, with or
// without "token", and ignores unknown fields.
type LockInfo struct {
	Key   string        // as the Locker names it (without its prefix)
	Node  string        // the server that reported it (Redlock: one LockInfo per node)
	TTL   time.Duration // time left before the lock expires; 0: it has no TTL (PostgreSQL: held while the session lives)
	Fence uint64        // the latest fence drawn for the key
	// Token is the holder's token, where the server keeps it: a secret,
	// with which anyone can extend or release the lock in the holder's
	// place (a backend's ReleaseToken). The JSON form leaves it out, so
	// that a listing (a /locks page) does not hand out the locks.
	Token   string
	Waiting int // waiters queued behind the holder
	// Majority reports, on a quorum backend, whether a majority of the
	// nodes hold the key with this token; on others, true.
	Majority bool
	// Limit is, for a semaphore's permit (Key is its slot's key, see
	// Semaphore), the limit its servers recorded; 0 for a lock.
	Limit int
	// Who holds it, where the holder published it (dlock run does; the
	// redislock's WithHolderInfo option does for library users) or the
	// server knows it (PostgreSQL: the session's pid, application name
	// and since when it holds the lock).
	Host    string
	PID     int
	Service string
	Since   time.Time
}

// lockInfoJSON is LockInfo's JSON form, part of the dlock command's contract.
type lockInfoJSON struct {
	Key      string      `json:"key"`
	Node     string      `json:"node"`
	TTLms    int64       `json:"ttl_ms"`
	Fence    *uint64     `json:"fence"`
	Holder   *holderJSON `json:"holder"`
	Token    string      `json:"token,omitempty"`
	Waiting  int         `json:"waiting"`
	Majority bool        `json:"majority"`
	Limit    int         `json:"limit,omitempty"`
}

type holderJSON struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Service string    `json:"service,omitempty"`
	Since   time.Time `json:"since,omitzero"`
}

// MarshalJSON encodes li in the form described on LockInfo, without its
// token.
func (li LockInfo) MarshalJSON() ([]byte, error) { return json.Marshal(li.toJSON(false)) }

// MarshalJSONWithToken is MarshalJSON with the token as "token" (when it
// is not empty): for a tool that hands tokens to an operator entitled to
// release the locks, as `dlock inspect --show-token` does.
func (li LockInfo) MarshalJSONWithToken() ([]byte, error) { return json.Marshal(li.toJSON(true)) }

func (li LockInfo) toJSON(withToken bool) lockInfoJSON {
	j := lockInfoJSON{Key: li.Key, Node: li.Node, Waiting: li.Waiting, Majority: li.Majority, Limit: li.Limit}
	if li.TTL > 0 { // rounded up: a lock about to expire still has one
		j.TTLms = int64((li.TTL-1)/time.Millisecond) + 1
	}
	if li.Fence != 0 {
		j.Fence = &li.Fence
	}
	if li.Host != "" || li.PID != 0 || li.Service != "" || !li.Since.IsZero() {
		j.Holder = &holderJSON{Host: li.Host, PID: li.PID, Service: li.Service, Since: li.Since}
	}
	if withToken {
		j.Token = li.Token
	}
	return j
}

// UnmarshalJSON decodes the form described on LockInfo, "token" included
// when present. A negative or overflowing "ttl_ms" is an error matching
// ErrInvalid.
func (li *LockInfo) UnmarshalJSON(b []byte) error {
	var j lockInfoJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.TTLms < 0 || j.TTLms > math.MaxInt64/int64(time.Millisecond) {
		return bridge.Invalidf("LockInfo: ttl_ms %d out of range", j.TTLms)
	}
	*li = LockInfo{Key: j.Key, Node: j.Node, TTL: time.Duration(j.TTLms) * time.Millisecond,
		Token: j.Token, Waiting: j.Waiting, Majority: j.Majority, Limit: j.Limit}
	if j.Fence != nil {
		li.Fence = *j.Fence
	}
	if h := j.Holder; h != nil {
		li.Host, li.PID, li.Service, li.Since = h.Host, h.PID, h.Service, h.Since
	}
	return nil
}
