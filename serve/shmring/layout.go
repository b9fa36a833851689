package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Layout constants (see the package documentation).
const (
	RingMagic       = "STRATARG"
	SlotMagic       = "STRATASL"
	Version         = 1
	RingHeaderBytes = 4096
	SlotHeaderBytes = 1024
	EntryBytes      = 72
	NameBytes       = 16
	MaxTensors      = 8
	MaxRank         = 4
	MaxSlots        = 1024
	// SlotAlign: slot sizes are multiples of the page size, so that a
	// reader can map one slot alone.
	SlotAlign = 4096
	// DataAlign: tensor offsets are multiples of 64 bytes (a cache line;
	// what SIMD loads and numpy like).
	DataAlign    = 64
	MinSlotBytes = SlotAlign
	// MaxSlotBytes bounds one slot (and so one batch in the ring).
	MaxSlotBytes = 1 << 40

	tableOff = 40
)

// Element types, with servepb.DType's numbers.
const (
	DTypeInt32   = 1
	DTypeInt64   = 2
	DTypeFloat32 = 3
	// DTypeBFloat16: features a server sent rounded (a relay's ring
	// carries them as they came).
	DTypeBFloat16 = 4
)

// ItemSize is the byte size of one element of dtype, 0 if unknown.
func ItemSize(dtype uint32) int64 {
	switch dtype {
	case DTypeInt32, DTypeFloat32:
		return 4
	case DTypeInt64:
		return 8
	case DTypeBFloat16:
		return 2
	}
	return 0
}

// ErrCorrupt is wrapped by every error about a malformed ring or slot
// header.
var ErrCorrupt = errors.New("shmring: malformed shared-memory ring")

// FormatError says what is wrong where: What names the header ("ring
// header", "slot 3"), Off the byte offset within it (-1: as a whole).
type FormatError struct {
	What string
	Off  int64
	Msg  string
}

func (e *FormatError) Error() string {
	if e.Off >= 0 {
		return fmt.Sprintf("shmring: %s: at byte %d: %s", e.What, e.Off, e.Msg)
	}
	return fmt.Sprintf("shmring: %s: %s", e.What, e.Msg)
}

func (e *FormatError) Unwrap() error { return ErrCorrupt }

func formatErr(what string, off int64, format string, args ...any) *FormatError {
	return &FormatError{What: what, Off: off, Msg: fmt.Sprintf(format, args...)}
}

// RingHeader is the header of a ring file.
type RingHeader struct {
	Slots     int
	SlotBytes int64
	Nonce     uint64
}

// FileBytes is the size of the ring file h describes.
func (h RingHeader) FileBytes() int64 { return RingHeaderBytes + int64(h.Slots)*h.SlotBytes }

// Check validates the geometry: 1..MaxSlots slots of a multiple of
// SlotAlign bytes in [MinSlotBytes, MaxSlotBytes].
func (h RingHeader) Check() error {
	if h.Slots < 1 || h.Slots > MaxSlots {
		return formatErr("ring header", 12, "%d slots, want 1..%d", h.Slots, MaxSlots)
	}
	if h.SlotBytes < MinSlotBytes || h.SlotBytes > MaxSlotBytes || h.SlotBytes%SlotAlign != 0 {
		return formatErr("ring header", 16, "slot size %d bytes, want a multiple of %d in [%d, %d]", h.SlotBytes, SlotAlign, MinSlotBytes, int64(MaxSlotBytes))
	}
	return nil
}

// Encode returns the RingHeaderBytes bytes of h.
func (h RingHeader) Encode() []byte {
	b := make([]byte, RingHeaderBytes)
	copy(b, RingMagic)
	le := binary.LittleEndian
	le.PutUint32(b[8:], Version)
	le.PutUint32(b[12:], uint32(h.Slots))
	le.PutUint64(b[16:], uint64(h.SlotBytes))
	le.PutUint64(b[24:], h.Nonce)
	le.PutUint32(b[32:], crc32.ChecksumIEEE(b[:32]))
	return b
}

// ParseRingHeader reads and checks a ring header (b holds at least its
// first 36 bytes).
func ParseRingHeader(b []byte) (RingHeader, error) {
	var h RingHeader
	if len(b) < 36 {
		return h, formatErr("ring header", -1, "%d bytes, want at least 36", len(b))
	}
	if string(b[:8]) != RingMagic {
		return h, formatErr("ring header", 0, "magic %q, want %q", b[:8], RingMagic)
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[32:]), crc32.ChecksumIEEE(b[:32]); got != want {
		return h, formatErr("ring header", 32, "checksum %08x, computed %08x", got, want)
	}
	if v := le.Uint32(b[8:]); v != Version {
		return h, formatErr("ring header", 8, "version %d, this build reads %d", v, Version)
	}
	sb := le.Uint64(b[16:])
	if sb > MaxSlotBytes {
		return h, formatErr("ring header", 16, "slot size %d bytes, at most %d", sb, int64(MaxSlotBytes))
	}
	h = RingHeader{Slots: int(le.Uint32(b[12:])), SlotBytes: int64(sb), Nonce: le.Uint64(b[24:])}
	return h, h.Check()
}

// Tensor is one entry of a slot's table.
type Tensor struct {
	Name   string
	DType  uint32
	Shape  []int64 // at most MaxRank dimensions
	Offset int64   // from the slot's start
	Bytes  int64
}

// Place lays tensors out in a slot: each after the previous one, from
// SlotHeaderBytes, at DataAlign boundaries. It fills Offset and Bytes and
// returns the bytes used (header included). Names must be 1..NameBytes
// ASCII characters.
func Place(ts []Tensor) (int64, error) {
	if len(ts) > MaxTensors {
		return 0, fmt.Errorf("shmring: %d tensors, at most %d", len(ts), MaxTensors)
	}
	off := int64(SlotHeaderBytes)
	for i := range ts {
		t := &ts[i]
		if err := checkName(t.Name); err != nil {
			return 0, fmt.Errorf("shmring: tensor %d: %v", i, err)
		}
		n, err := elems(t.DType, t.Shape)
		if err != nil {
			return 0, fmt.Errorf("shmring: tensor %s: %v", t.Name, err)
		}
		t.Bytes = n * ItemSize(t.DType)
		t.Offset = off
		if t.Bytes > MaxSlotBytes-off {
			return 0, fmt.Errorf("shmring: tensor %s: %d bytes from offset %d exceed a slot's %d", t.Name, t.Bytes, off, int64(MaxSlotBytes))
		}
		off = (off + t.Bytes + DataAlign - 1) / DataAlign * DataAlign
	}
	return off, nil
}

func checkName(s string) error {
	if len(s) == 0 || len(s) > NameBytes {
		return fmt.Errorf("name %q: want 1..%d characters", s, NameBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("name %q: character %d is not printable ASCII", s, i)
		}
	}
	return nil
}

// elems returns the element count of shape, checking dtype, rank, signs
// and overflow.
func elems(dtype uint32, shape []int64) (int64, error) {
	is := ItemSize(dtype)
	if is == 0 {
		return 0, fmt.Errorf("unknown dtype %d", dtype)
	}
	if len(shape) > MaxRank {
		return 0, fmt.Errorf("%d dimensions, at most %d", len(shape), MaxRank)
	}
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is %d < 0", i, d)
		}
		if d > 0 && n > MaxSlotBytes/is/d {
			return 0, fmt.Errorf("shape %v: over %d bytes", shape, int64(MaxSlotBytes))
		}
		n *= d
	}
	return n, nil
}

// WriteSlotHeader writes the header of a slot holding ts (placed by
// Place, used bytes in all) for batch sequence seq. Write it after the
// data: the reader reads a slot only after the message that names it.
func WriteSlotHeader(slot []byte, seq uint64, used int64, ts []Tensor) error {
	if len(ts) > MaxTensors || len(slot) < SlotHeaderBytes || used > int64(len(slot)) {
		return fmt.Errorf("shmring: %d tensors, %d used bytes in a %d-byte slot", len(ts), used, len(slot))
	}
	le := binary.LittleEndian
	h := slot[:SlotHeaderBytes]
	clear(h)
	copy(h, SlotMagic)
	le.PutUint32(h[8:], Version)
	le.PutUint32(h[12:], uint32(len(ts)))
	le.PutUint64(h[16:], seq)
	le.PutUint64(h[24:], uint64(used))
	for i, t := range ts {
		e := h[tableOff+i*EntryBytes:]
		copy(e[:NameBytes], t.Name)
		le.PutUint32(e[16:], t.DType)
		le.PutUint32(e[20:], uint32(len(t.Shape)))
		for k, d := range t.Shape {
			le.PutUint64(e[24+8*k:], uint64(d))
		}
		le.PutUint64(e[56:], uint64(t.Offset))
		le.PutUint64(e[64:], uint64(t.Bytes))
	}
	le.PutUint32(h[36:], slotCRC(h, len(ts)))
	return nil
}

func slotCRC(h []byte, count int) uint32 {
	c := crc32.ChecksumIEEE(h[:36])
	return crc32.Update(c, crc32.IEEETable, h[tableOff:tableOff+count*EntryBytes])
}

// SlotHeader is a parsed slot header.
type SlotHeader struct {
	Sequence uint64
	Used     int64
	Tensors  []Tensor
}

// ParseSlotHeader reads and checks the header of a slot of slotBytes
// bytes (b holds at least its SlotHeaderBytes): magic, version, checksum,
// the sequence wanted, and every tensor's name (distinct), dtype, rank,
// shape, size and place within the used bytes, without overlaps. what
// names the slot in errors.
func ParseSlotHeader(b []byte, slotBytes int64, seq uint64, what string) (*SlotHeader, error) {
	if len(b) < SlotHeaderBytes {
		return nil, formatErr(what, -1, "%d bytes, want at least %d", len(b), SlotHeaderBytes)
	}
	if string(b[:8]) != SlotMagic {
		return nil, formatErr(what, 0, "magic %q, want %q (not written?)", b[:8], SlotMagic)
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[8:]); v != Version {
		return nil, formatErr(what, 8, "version %d, this build reads %d", v, Version)
	}
	count := le.Uint32(b[12:])
	if count > MaxTensors {
		return nil, formatErr(what, 12, "%d tensors, at most %d", count, MaxTensors)
	}
	if got, want := le.Uint32(b[36:]), slotCRC(b, int(count)); got != want {
		return nil, formatErr(what, 36, "checksum %08x, computed %08x", got, want)
	}
	if s := le.Uint64(b[16:]); s != seq {
		return nil, formatErr(what, 16, "holds batch %d, the message says %d (stale or overwritten slot)", s, seq)
	}
	used := le.Uint64(b[24:])
	if used < SlotHeaderBytes || used > uint64(slotBytes) {
		return nil, formatErr(what, 24, "%d bytes used, want %d..%d (the slot size)", used, SlotHeaderBytes, slotBytes)
	}
	h := &SlotHeader{Sequence: seq, Used: int64(used), Tensors: make([]Tensor, count)}
	end := int64(SlotHeaderBytes)
	for i := range h.Tensors {
		base := int64(tableOff + i*EntryBytes)
		e := b[base : base+EntryBytes]
		name := e[:NameBytes]
		n := 0
		for n < NameBytes && name[n] != 0 {
			n++
		}
		for _, c := range name[n:] {
			if c != 0 {
				return nil, formatErr(what, base, "tensor %d: name not NUL-padded", i)
			}
		}
		t := Tensor{Name: string(name[:n]), DType: le.Uint32(e[16:])}
		if err := checkName(t.Name); err != nil {
			return nil, formatErr(what, base, "tensor %d: %v", i, err)
		}
		for _, o := range h.Tensors[:i] {
			if o.Name == t.Name {
				return nil, formatErr(what, base, "tensor %d: name %q repeats", i, t.Name)
			}
		}
		rank := le.Uint32(e[20:])
		if rank > MaxRank {
			return nil, formatErr(what, base+20, "tensor %s: rank %d, at most %d", t.Name, rank, MaxRank)
		}
		for k := range MaxRank {
			d := int64(le.Uint64(e[24+8*k:]))
			if uint32(k) >= rank {
				if d != 0 {
					return nil, formatErr(what, base+24+8*int64(k), "tensor %s: unused dimension %d is %d, want 0", t.Name, k, d)
				}
				continue
			}
			t.Shape = append(t.Shape, d)
		}
		cnt, err := elems(t.DType, t.Shape)
		if err != nil {
			return nil, formatErr(what, base+16, "tensor %s: %v", t.Name, err)
		}
		off, nb := le.Uint64(e[56:]), le.Uint64(e[64:])
		if nb != uint64(cnt*ItemSize(t.DType)) {
			return nil, formatErr(what, base+64, "tensor %s: %d bytes, shape %v needs %d", t.Name, nb, t.Shape, cnt*ItemSize(t.DType))
		}
		if off%DataAlign != 0 || off < uint64(end) || off > used || nb > used-off {
			return nil, formatErr(what, base+56, "tensor %s: bytes [%d, +%d) not aligned to %d, overlapping the previous one (ending at %d) or past the %d used",
				t.Name, off, nb, DataAlign, end, used)
		}
		t.Offset, t.Bytes = int64(off), int64(nb)
		end = t.Offset + t.Bytes
		h.Tensors[i] = t
	}
	return h, nil
}

// SlotOffset is the file offset of slot k of h's ring, -1 if there is no
// slot k.
func (h RingHeader) SlotOffset(k int) int64 {
	if k < 0 || k >= h.Slots {
		return -1
	}
	return RingHeaderBytes + int64(k)*h.SlotBytes
}

// ErrNoSpace is wrapped by Create's error when the ring's file system
// (usually /dev/shm) cannot hold it.
var ErrNoSpace = errors.New("not enough space for the ring")
