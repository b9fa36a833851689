//go:build linux

package shm

import (
	"os"

	sg "github.com/strata-gnn/strata/comm/internal/segment"
)

// Bounds checked when a segment is created or attached.
const (
	MaxRanks     = 1024
	MaxSlots     = 256
	MaxSlotBytes = 64 << 20
	minSlotBytes = 4096

	segMagic   = 0x4853415441525453 // "STRATASH"
	segVersion = 3                  // 3: slot headers and the operation descriptor
	// MaxHeapBytes bounds each rank's heap.
	MaxHeapBytes = 1 << 40

	page     = sg.Page
	ctlBytes = 256 // per rank
)

// Header fields past the common ones (sg.HMissing's bitmap ends at 192).
const (
	hHeapBytes = 192
	hReason    = 256
)

// Per-rank control fields past the common ones (offsets within the rank's
// ctlBytes).
const (
	cDone = 16 // uint64: last sequence number finished (or failed)
	cExch = 64 // two sets (by parity) of exchWords int64 values
	// cExchHdr: two headers (by parity) saying which operation an
	// exchange belongs to, each laid out as in a flag's cache line
	// (sg.SetHeader at cExchHdr + parity*hdrStride).
	cExchHdr  = 128
	hdrStride = 40
	// cDesc: the operation this rank is in (sg.SetHeader at cDesc, under
	// the seqlock word at cDesc), read by peers whose wait is slow.
	cDesc = 208
)

const exchWords = 4

// spec is the host segment: per rank K input slots and K output flags, K
// result slots and flags, one barrier flag per rank, then the heaps.
var spec = &sg.Spec{
	Prefix: "shm", Name: "Strata", Magic: segMagic, Version: segVersion,
	MaxRanks: MaxRanks, MaxSlots: MaxSlots, MinSlotBytes: minSlotBytes, MaxSlotBytes: MaxSlotBytes, SlotWord: "slot",
	MaxHeapBytes: MaxHeapBytes, HHeapBytes: hHeapBytes, HReason: hReason,
	CtlBytes: ctlBytes,
	Flags:    func(n, k int) int { return 2*n*k + k + n },
	LimitRAM: true,
}

type layout = sg.Layout

func newLayout(n, k, slot, heap int) (layout, error) { return sg.NewLayout(spec, n, k, slot, heap) }

func initSegment(f *os.File, l layout) error { return sg.Init(f, spec, l) }

// segment is one rank's mapping, with the meaning of its flags.
type segment struct{ *sg.Seg }

func attach(f *os.File, rank, n int) (segment, error) {
	s, err := sg.Attach(f, spec, rank, n)
	return segment{s}, err
}

func (s segment) inFlag(r, slot int) *uint32 { return s.Flag(r*s.L.Slots + slot) }
func (s segment) resFlag(slot int) *uint32   { return s.Flag(s.L.N*s.L.Slots + slot) }
func (s segment) outFlag(r, slot int) *uint32 {
	return s.Flag(s.L.N*s.L.Slots + s.L.Slots + r*s.L.Slots + slot)
}
func (s segment) barFlag(r int) *uint32 { return s.Flag(2*s.L.N*s.L.Slots + s.L.Slots + r) }
