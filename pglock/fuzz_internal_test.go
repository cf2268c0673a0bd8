package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// FuzzNames: whatever the text, pglock maps it without confusion. HashKey
// is the documented SHA-256 prefix and its name comes back unchanged; the
// release notification of a key names its advisory key (the payload a
// waiter matches) and no other, so a payload sent by anyone wakes only the
// waiter of the key it names; pg_locks' view of a key is the key; a queue
// table name is refused with ErrInvalid or quoted so that it means the
// same parts; and an error message of any text becomes one line without
// losing its words or its chain.
func FuzzNames(f *testing.F) {
	f.Fuzz(func(t *testing.T, name, payload string, a, b int32) {
		k := HashKey(name)
		sum := sha256.Sum256([]byte(name))
		if n, ok := k.Int64(); !ok || n != int64(binary.BigEndian.Uint64(sum[:8])) || k.String() != name {
			t.Fatalf("HashKey(%q) = %+v", name, k)
		}
		if classid, objid, sub := k.lockID(); sub != 1 || uint64(classid)<<32|uint64(objid) != uint64(k.n) || classid>>32 != 0 || objid>>32 != 0 {
			t.Fatalf("HashKey(%q).lockID() = %d, %d, %d", name, classid, objid, sub)
		}
		p := KeyPair(a, b)
		if classid, objid, sub := p.lockID(); sub != 2 || classid != int64(uint32(a)) || objid != int64(uint32(b)) {
			t.Fatalf("KeyPair(%d, %d).lockID() = %d, %d, %d", a, b, classid, objid, sub)
		}
		if got, want := k.notifyID(), "i"+strconv.FormatInt(k.n, 10); got != want {
			t.Fatalf("notifyID of %q = %q, want %q", name, got, want)
		}
		if got, want := p.notifyID(), "p"+strconv.Itoa(int(a))+","+strconv.Itoa(int(b)); got != want {
			t.Fatalf("notifyID of (%d, %d) = %q, want %q", a, b, got, want)
		}

		n := &listener{byKey: map[string][]chan struct{}{}}
		wk, wp := make(chan struct{}, 1), make(chan struct{}, 1)
		n.byKey[k.notifyID()] = []chan struct{}{wk}
		n.byKey[p.notifyID()] = []chan struct{}{wp}
		n.released(payload)
		if woke := len(wk) == 1; woke != (payload == k.notifyID()) {
			t.Fatalf("payload %q woke the waiter of %q: %v", payload, name, woke)
		}
		if woke := len(wp) == 1; woke != (payload == p.notifyID()) {
			t.Fatalf("payload %q woke the waiter of (%d, %d): %v", payload, a, b, woke)
		}

		err := nodeerr.OneLine(errors.Join(dlock.ErrUnavailable, errors.New(name)))
		if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("OneLine(%q) = %q", name, msg)
		} else if words := func(s string) string { return strings.Join(strings.Fields(strings.ReplaceAll(s, ";", " ")), " ") }; words(msg) != words(dlock.ErrUnavailable.Error()+"\n"+name) {
			t.Fatalf("OneLine(%q) = %q: words changed", name, msg)
		}
	})
}

// FuzzRowCodec: the hand-written binary row codec reads only what it can
// read exactly. Any column values, for any column types, decode without a
// panic, either into exactly the bytes' meaning or into an error; what
// encode writes decodes back to the same values.
func FuzzRowCodec(f *testing.F) {
	f.Fuzz(func(t *testing.T, types string, data []byte) {
		if len(types) > 6 {
			types = types[:6]
		}
		// Column i's value: one length byte (255: NULL), then the bytes.
		vals := make([][]byte, 0, len(types))
		dest := make([]any, 0, len(types))
		for i := range len(types) {
			switch types[i] % 4 {
			case 0:
				dest = append(dest, new(pgtype.Int8))
			case 1:
				dest = append(dest, new(int32))
			case 2:
				dest = append(dest, new(bool))
			default:
				dest = append(dest, new(string))
			}
			var v []byte
			if len(data) > 0 {
				n := int(data[0])
				data = data[1:]
				if n != 255 {
					v = data[:min(n, len(data))]
					data = data[len(v):]
				}
			}
			vals = append(vals, v)
		}
		if err := decodeRow(vals, dest); err != nil {
			return
		}
		for i, v := range vals {
			ok := false
			switch d := dest[i].(type) {
			case *pgtype.Int8:
				ok = v == nil && !d.Valid || len(v) == 8 && d.Valid && uint64(d.Int64) == binary.BigEndian.Uint64(v)
			case *int32:
				ok = len(v) == 4 && uint32(*d) == binary.BigEndian.Uint32(v)
			case *bool:
				ok = len(v) == 1 && *d == (v[0] != 0)
			case *string:
				ok = v != nil && *d == string(v)
			}
			if !ok {
				t.Fatalf("column %d (%T) decoded %q as %v", i, dest[i], v, dest[i])
			}
		}

		// encode: the same values as arguments decode back.
		var b rowBufs
		var oids []uint32
		var args []any
		for _, d := range dest {
			switch d := d.(type) {
			case *pgtype.Int8:
				if d.Valid {
					oids, args = append(oids, pgtype.Int8OID), append(args, &d.Int64)
				}
			case *int32:
				oids, args = append(oids, pgtype.Int4OID), append(args, d)
			case *string:
				oids, args = append(oids, pgtype.TextOID), append(args, *d)
			}
		}
		if len(args) > len(b.params) {
			return
		}
		params, ok := b.encode(oids, args)
		if !ok {
			t.Fatalf("encode(%v) refused its own types", oids)
		}
		for i, a := range args {
			var got, want string
			switch a := a.(type) {
			case *int64:
				got, want = string(params[i]), string(binary.BigEndian.AppendUint64(nil, uint64(*a)))
			case *int32:
				got, want = string(params[i]), string(binary.BigEndian.AppendUint32(nil, uint32(*a)))
			case string:
				got, want = string(params[i]), a
			}
			if got != want {
				t.Fatalf("encode arg %d (%T): %q, want %q", i, a, got, want)
			}
		}
	})
}
