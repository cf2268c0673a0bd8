package pgqueue

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

// FuzzTable: a queue table name is refused with ErrInvalid, on one line,
// or quoted so that it means the same parts.
func FuzzTable(f *testing.F) {
	for _, name := range []string{"", "jobs", "app.jobs", "a..b", "a.b.c", "\xc3\xbf\xc3\xbe.\x01", "a\x00b", `we"ird.na me`} {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if q, err := NewQueue(name); err != nil {
			if !errors.Is(err, dlock.ErrInvalid) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("NewQueue(%q): %v", name, err)
			}
		} else if parts := unquoteIdentifiers(t, q.table); strings.Join(parts, ".") != name || strings.ContainsRune(name, 0) {
			t.Fatalf("NewQueue(%q) quotes it as %s, which names %q", name, q.table, parts)
		}
	})
}

// unquoteIdentifiers splits a dot-separated list of double-quoted SQL
// identifiers, as pgx.Identifier.Sanitize writes them.
func unquoteIdentifiers(t *testing.T, s string) []string {
	var parts []string
	for s != "" {
		if s[0] != '"' {
			t.Fatalf("identifier list %q: no opening quote", s)
		}
		var part strings.Builder
		i := 1
		for ; ; i++ {
			if i >= len(s) {
				t.Fatalf("identifier list %q: no closing quote", s)
			}
			if s[i] == '"' {
				if i+1 < len(s) && s[i+1] == '"' {
					part.WriteByte('"')
					i++
					continue
				}
				break
			}
			part.WriteByte(s[i])
		}
		parts = append(parts, part.String())
		s = s[i+1:]
		if s != "" {
			if s[0] != '.' || len(s) == 1 {
				t.Fatalf("identifier list: %q after an identifier", s)
			}
			s = s[1:]
		}
	}
	return parts
}
