//go:build linux

package gpushm

import (
	"os"

	sg "github.com/strata-gnn/strata/comm/internal/segment"
)

// Segment constants (the bounds MaxRanks, MaxSlots, MaxChunkBytes and
// minChunkBytes, checked when a segment is created or attached, are in
// gpushm.go).
const (
	segMagic   = 0x4d48535550475453 // "STGPUSHM"
	segVersion = 3                  // 2: flags mapped for the device path; 3: headers in the host pipeline's in flags

	page     = sg.Page
	ctlBytes = 64
	hReason  = 128 // after sg.HMissing's bitmap of MaxRanks bits
)

// Per-rank control fields past the common ones.
const (
	cLeft  = 16 // uint64: last sequence number completed before Close
	cProbe = 24 // uint32: scratch word for checking the device can use the mapped flags
)

// spec is the GPU segment: flags (in, red, done per rank and slot), then
// the data: per rank `slots` input chunks, then `slots` result chunks.
var spec = &sg.Spec{
	Prefix: "gpushm", Name: "Strata GPU", Magic: segMagic, Version: segVersion,
	MaxRanks: MaxRanks, MaxSlots: MaxSlots, MinSlotBytes: minChunkBytes, MaxSlotBytes: MaxChunkBytes, SlotWord: "chunk",
	HReason:  hReason,
	CtlBytes: ctlBytes,
	Flags:    func(n, slots int) int { return 3 * n * slots },
}

type layout = sg.Layout

func newLayout(n, slots, chunk int) (layout, error) { return sg.NewLayout(spec, n, slots, chunk, 0) }

func initSegment(f *os.File, l layout) error { return sg.Init(f, spec, l) }

// segment is one rank's mapping, with the meaning of its flags.
type segment struct{ *sg.Seg }

func attach(f *os.File, rank, n int) (segment, error) {
	s, err := sg.Attach(f, spec, rank, n)
	return segment{s}, err
}

// inFlag(r, s): rank r's chunk in input slot s has arrived (use u: u+1).
func (s segment) inFlag(r, slot int) *uint32 { return s.Flag(r*s.L.Slots + slot) }

// redFlag(r, s): rank r has reduced its share of the chunk in slot s.
func (s segment) redFlag(r, slot int) *uint32 { return s.Flag((s.L.N+r)*s.L.Slots + slot) }

// doneFlag(r, s): rank r has copied the result of slot s back to its
// device (so the slot may be reused).
func (s segment) doneFlag(r, slot int) *uint32 { return s.Flag((2*s.L.N+r)*s.L.Slots + slot) }
