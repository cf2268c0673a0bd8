package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"

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
