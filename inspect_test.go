package dlock_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestLockInfoJSONSchema: LockInfo encodes to the schema `dlock inspect
// --json` documents (durations in ms, lower-case names, null for what is
// unknown) and never shows its token; a lock about to expire is not shown
// as one without a TTL.
func TestLockInfoJSONSchema(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		in   dlock.LockInfo
		want string
	}{
		{"zero", dlock.LockInfo{},
			`{"key":"","node":"","ttl_ms":0,"fence":null,"holder":null,"waiting":0,"majority":false}`},
		{"redis, held by dlock run", dlock.LockInfo{Key: "billing", Node: "10.0.0.5:6379", TTL: 28500 * time.Millisecond,
			Fence: 42, Token: "secret-token", Majority: true, Host: "web-1", PID: 4242, Since: since},
			`{"key":"billing","node":"10.0.0.5:6379","ttl_ms":28500,"fence":42,` +
				`"holder":{"host":"web-1","pid":4242,"since":"2026-12-01T10:00:00Z"},"waiting":0,"majority":true}`},
		{"postgres session", dlock.LockInfo{Key: "advisory:7", Node: "db:5432", PID: 99, Service: "cron", Waiting: 2, Majority: true},
			`{"key":"advisory:7","node":"db:5432","ttl_ms":0,"fence":null,` +
				`"holder":{"host":"","pid":99,"service":"cron"},"waiting":2,"majority":true}`},
		{"about to expire", dlock.LockInfo{Key: "k", TTL: time.Microsecond, Majority: true},
			`{"key":"k","node":"","ttl_ms":1,"fence":null,"holder":null,"waiting":0,"majority":true}`},
		{"rounded up", dlock.LockInfo{Key: "k", TTL: 1500 * time.Microsecond},
			`{"key":"k","node":"","ttl_ms":2,"fence":null,"holder":null,"waiting":0,"majority":false}`},
	} {
		b, err := json.Marshal(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
		// Through a pointer and in a slice, as a /locks handler would.
		b, err = json.Marshal([]*dlock.LockInfo{&c.in})
		if err != nil || string(b) != "["+c.want+"]" {
			t.Errorf("%s in a slice of pointers: %s, %v", c.name, b, err)
		}
	}
}

// TestLockInfoJSONRoundTrip: what MarshalJSONWithToken writes decodes to
// the same LockInfo, for every field LockInfo has: a field added later
// without a place in the JSON fails here.
func TestLockInfoJSONRoundTrip(t *testing.T) {
	in := dlock.LockInfo{}
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString(v.Type().Field(i).Name + "-value")
		case time.Duration:
			f.SetInt(int64(1234 * time.Millisecond))
		case int, uint64:
			if f.CanInt() {
				f.SetInt(int64(7 + i))
			} else {
				f.SetUint(uint64(1<<40 + i))
			}
		case bool:
			f.SetBool(true)
		case time.Time:
			f.Set(reflect.ValueOf(time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))))
		default:
			t.Fatalf("LockInfo.%s has type %s, which this test does not fill: extend it", v.Type().Field(i).Name, f.Type())
		}
	}
	b, err := in.MarshalJSONWithToken()
	if err != nil {
		t.Fatal(err)
	}
	var out dlock.LockInfo
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if !out.Since.Equal(in.Since) {
		t.Errorf("Since: got %v, want %v", out.Since, in.Since)
	}
	out.Since = in.Since
	if out != in {
		t.Errorf("round trip through %s:\n got %+v\nwant %+v", b, out, in)
	}
	if !strings.Contains(string(b), `"token":"Token-value"`) {
		t.Errorf("MarshalJSONWithToken left the token out: %s", b)
	}

	// Without the token, everything else survives and Token is empty.
	b, err = json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out = dlock.LockInfo{Token: "stale"}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Token-value") || out.Token != "" {
		t.Errorf("json.Marshal showed the token, or decoding kept an old one: %s, %+v", b, out)
	}
}

// TestLockInfoJSONBadInput: what cannot be a LockInfo is an error, never
// a panic or a silently wrong value.
func TestLockInfoJSONBadInput(t *testing.T) {
	for _, in := range []string{
		`{"ttl_ms":-1}`,
		`{"ttl_ms":9223372036855}`, // beyond time.Duration's range in ms
	} {
		var li dlock.LockInfo
		if err := json.Unmarshal([]byte(in), &li); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", in, err)
		}
	}
	for _, in := range []string{`{"fence":-1}`, `{"ttl_ms":"5"}`, `{"holder":[]}`, `[]`, `{"key":1}`, `{"holder":{"since":"yesterday"}}`} {
		var li dlock.LockInfo
		if err := json.Unmarshal([]byte(in), &li); err == nil {
			t.Errorf("%s: decoded to %+v, want an error", in, li)
		}
	}
	var li dlock.LockInfo
	if err := json.Unmarshal([]byte(`{"key":"k","fence":null,"holder":null,"extra":{"a":1}}`), &li); err != nil || li.Key != "k" {
		t.Errorf("nulls and an unknown field: %+v, %v", li, err)
	}
}

// FuzzLockInfoJSON: any input that decodes re-encodes to a form that
// decodes to the same LockInfo.
func FuzzLockInfoJSON(f *testing.F) {
	f.Add(`{"key":"billing","node":"n:1","ttl_ms":28500,"fence":42,"holder":{"host":"h","pid":1,"since":"2026-12-01T10:00:00Z"},"token":"t","waiting":1,"majority":true}`)
	f.Add(`{"ttl_ms":9223372036854,"fence":18446744073709551615}`)
	f.Add(`{"holder":{}}`)
	f.Fuzz(func(t *testing.T, in string) {
		var a dlock.LockInfo
		if json.Unmarshal([]byte(in), &a) != nil {
			return
		}
		b, err := a.MarshalJSONWithToken()
		if err != nil {
			t.Fatalf("%+v: %v", a, err)
		}
		var c dlock.LockInfo
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if !c.Since.Equal(a.Since) {
			t.Fatalf("Since %v became %v", a.Since, c.Since)
		}
		c.Since = a.Since
		if c != a {
			t.Fatalf("%s decoded to %+v, re-encoded as %s, decoded to %+v", in, a, b, c)
		}
	})
}
