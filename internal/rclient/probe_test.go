package rclient

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// reply is an error reply from a server, as go-redis returns it.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

// The probe's decision on the replies each kind of server gives to DELEX
// IFEQ, DELIFEQ and SET IFEQ on a missing key. The Redis 7 and miniredis
// rows are the replies those servers gave here (redislock's and compat's
// tests); the Redis 8.4 and Valkey rows follow their command documentation:
// no such server runs in this repository's tests.
func TestDecide(t *testing.T) {
	unknown := func(cmd string) error { return reply("ERR unknown command '" + cmd + "', with args beginning with: ") }
	syntax := reply("ERR syntax error")
	lost := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, c := range []struct {
		name                string
		delex, delifeq, set error
		want                Native
		wantOK              bool
	}{
		{"redis 7", unknown("delex"), unknown("delifeq"), syntax, Native{}, true},
		{"miniredis", nil, unknown("delifeq"), syntax, Native{Release: "delex"}, true},
		{"redis 8.4", nil, unknown("delifeq"), redis.Nil, Native{Release: "delex", SetIfEq: true}, true},
		{"valkey 8.1", unknown("delex"), unknown("delifeq"), redis.Nil, Native{SetIfEq: true}, true},
		{"valkey 9.0", unknown("delex"), nil, redis.Nil, Native{Release: "delifeq", SetIfEq: true}, true},
		{"valkey 9.2", nil, nil, redis.Nil, Native{Release: "delex", SetIfEq: true}, true},
		{"acl denies delex", reply("NOPERM User app has no permissions to run the 'delex' command"), unknown("delifeq"), redis.Nil, Native{SetIfEq: true}, true},
		{"no answer", lost, lost, lost, Native{}, false},
		{"one lost", nil, unknown("delifeq"), lost, Native{}, false},
	} {
		got, ok := decide(c.delex, c.delifeq, c.set)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: decide = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
}

func TestReleaseArgs(t *testing.T) {
	if got := (Native{Release: "delex"}).ReleaseArgs("k", "t"); len(got) != 4 || got[0] != "delex" || got[2] != "IFEQ" {
		t.Errorf("delex: %v", got)
	}
	if got := (Native{Release: "delifeq"}).ReleaseArgs("k", "t"); len(got) != 3 || got[0] != "delifeq" || got[2] != "t" {
		t.Errorf("delifeq: %v", got)
	}
}
