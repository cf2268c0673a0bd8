package rinspect

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/keys"
)

// Term is what one server knows of the holder of one lock key.
type Term struct {
	Token   string  // the lock key's value; "": nobody holds the key
	Counter uint64  // the key's fence counter (0: none)
	Record  *Record // the holder record, if its token is Token
}

// Record is the holder record of package holder, in keys.Holder(key).
type Record struct {
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Service  string    `json:"service,omitempty"`
	Since    time.Time `json:"since"`
	Identity string    `json:"identity,omitempty"`
	Token    string    `json:"token"`
	Fence    uint64    `json:"fence,omitempty"`
}

// Leader names the holder: the candidate's identity, else host:pid.
func (r *Record) Leader() string {
	if r.Identity != "" || r.Host == "" {
		return r.Identity
	}
	return r.Host + ":" + strconv.Itoa(r.PID)
}

// ReadTerm reads the lock key k (prefix included), its fence counter and
// its holder record in one transaction, and leaves out a record whose
// token is not the key's (an earlier holder's).
func ReadTerm(ctx context.Context, c redis.UniversalClient, k string) (Term, error) {
	p := c.TxPipeline()
	token, counter, rec := p.Get(ctx, k), p.Get(ctx, keys.Fence(k)), p.Get(ctx, keys.Holder(k))
	_, err := p.Exec(ctx)
	if err != nil && err != redis.Nil {
		return Term{}, err
	}
	var t Term
	if t.Token, err = token.Result(); err != nil && err != redis.Nil {
		return Term{}, err
	}
	if t.Token == "" {
		return Term{}, nil
	}
	if s, err := counter.Result(); err == nil {
		t.Counter, _ = strconv.ParseUint(s, 10, 64)
	}
	var r Record
	if s, err := rec.Result(); err == nil && json.Unmarshal([]byte(s), &r) == nil && r.Token == t.Token {
		t.Record = &r
	}
	return t, nil
}
