package bridge

import "testing"

// SlotPrefixOf undoes SlotKey: every slot key gives its semaphore's
// SlotPrefix back, and a key of no slot's form (no hash tag, no number)
// gives none.
func TestSlotPrefixOf(t *testing.T) {
	for _, name := range []string{"a", "{a}", "vendor-api", "{tenant:7}:exports", "x#1", "a}{b"} {
		for _, slot := range []int{0, 7, 999} {
			if got, ok := SlotPrefixOf(SlotKey(name, slot)); !ok || got != SlotPrefix(name) {
				t.Errorf("SlotPrefixOf(%q) = %q, %v; want %q", SlotKey(name, slot), got, ok, SlotPrefix(name))
			}
		}
	}
	for _, key := range []string{"a", "a#1", "{a}#", "{a}#x", "{a}1", "{}#1", ""} {
		if got, ok := SlotPrefixOf(key); ok {
			t.Errorf("SlotPrefixOf(%q) = %q, true; want no semaphore", key, got)
		}
	}
}
