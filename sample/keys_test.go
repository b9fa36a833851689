package sample

import "testing"

// TestHopKey: the hop key is deterministic and changes with every field
// of the batch key and with the hop.
func TestHopKey(t *testing.T) {
	k := Key{Seed: 7, Epoch: 2, Batch: 3}
	base := HopKey(k, 1)
	for name, other := range map[string]uint64{
		"seed":  HopKey(Key{Seed: 8, Epoch: 2, Batch: 3}, 1),
		"epoch": HopKey(Key{Seed: 7, Epoch: 3, Batch: 3}, 1),
		"batch": HopKey(Key{Seed: 7, Epoch: 2, Batch: 4}, 1),
		"hop":   HopKey(k, 0),
	} {
		if other == base {
			t.Errorf("HopKey ignores the %s", name)
		}
	}
	if HopKey(k, 1) != base {
		t.Fatal("HopKey is not deterministic")
	}
}
