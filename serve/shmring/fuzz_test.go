package shmring

import (
	"testing"
)

// FuzzParseSlotHeader: any bytes give a header whose tensors lie within
// the used bytes of the slot, or an ErrCorrupt; never a panic.
func FuzzParseSlotHeader(f *testing.F) {
	b, _, _ := slotWith(f, SlotHeaderBytes+1024, 5)
	f.Add(b[:SlotHeaderBytes], uint64(5))
	empty := make([]byte, SlotHeaderBytes)
	WriteSlotHeader(empty, 0, SlotHeaderBytes, nil)
	f.Add(empty, uint64(0))
	f.Add(make([]byte, 40), uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64) {
		const slotBytes = 1 << 20
		h, err := ParseSlotHeader(b, slotBytes, seq, "slot")
		if err != nil {
			return
		}
		if h.Used > slotBytes || h.Used < SlotHeaderBytes {
			t.Fatalf("used %d", h.Used)
		}
		end := int64(SlotHeaderBytes)
		for _, ts := range h.Tensors {
			if ts.Offset < end || ts.Offset+ts.Bytes > h.Used || ts.Offset%DataAlign != 0 {
				t.Fatalf("tensor %+v outside [%d, %d)", ts, end, h.Used)
			}
			n, err := elems(ts.DType, ts.Shape)
			if err != nil || n*ItemSize(ts.DType) != ts.Bytes {
				t.Fatalf("tensor %+v: %d elements, %v", ts, n, err)
			}
			end = ts.Offset + ts.Bytes
		}
	})
}

// FuzzParseRingHeader: any bytes give a valid geometry or an error.
func FuzzParseRingHeader(f *testing.F) {
	f.Add(RingHeader{Slots: 4, SlotBytes: 8192, Nonce: 1}.Encode()[:64])
	f.Add([]byte("STRATARG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseRingHeader(b)
		if err != nil {
			return
		}
		if h.Check() != nil || h.FileBytes() <= RingHeaderBytes {
			t.Fatalf("accepted %+v", h)
		}
	})
}
