package keys

import "testing"

// The counter must land in the lock key's Cluster slot, or the acquire
// script would fail with CROSSSLOT on a Cluster.
func TestFenceSameSlot(t *testing.T) {
	for _, key := range []string{
		"invoice:4821", "{user:1}:lock", "a{b}c", "a{b", "x", "lock:{", "ünïcode",
	} {
		got, want := slot(Fence(key)), slot(key)
		if got != want {
			t.Errorf("Fence(%q) = %q in slot %d, want slot %d", key, Fence(key), got, want)
		}
		if Fence(key) == key {
			t.Errorf("Fence(%q) equals the lock key", key)
		}
	}
}

func TestHasHashTag(t *testing.T) {
	for key, want := range map[string]bool{
		"a": false, "{a}": true, "x{a}y": true, "{}": false, "{}{a}": false, "a{": false, "}{a}": true,
	} {
		if got := HasHashTag(key); got != want {
			t.Errorf("HasHashTag(%q) = %v, want %v", key, got, want)
		}
	}
}

// slot is Redis Cluster's key slot: CRC16-XMODEM of the hash tag (or of the
// whole key) modulo 16384.
func slot(key string) int {
	if HasHashTag(key) {
		open := indexByte(key, '{')
		end := indexByte(key[open+1:], '}')
		key = key[open+1 : open+1+end]
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
