//go:build linux

package segment

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-gnn/strata/comm"
)

const (
	// Page is the header's size and the alignment of every region.
	Page = 4096
	// FlagSize is the room of one flag: one counter per cache line.
	FlagSize = 64
)

// Header field offsets common to every segment.
const (
	HMagic     = 0
	HVersion   = 8
	HRanks     = 12
	HSlots     = 16
	HSlotBytes = 20
	HSegBytes  = 24
	HAttached  = 32 // futex word: ranks attached
	HAbort     = 36 // futex word: 0 none, 1 being written, 2 published
	HAbortBy   = 40
	HAbortSeq  = 48
	HAbortLen  = 56 // reason length
	HMissing   = 64 // bitmap of missing ranks, Spec.MaxRanks bits
)

// Per-rank control fields common to every segment (offsets within the
// rank's Spec.CtlBytes); a back end places its own after CEntered.
const (
	CPid     = 0 // int32
	CState   = 4 // uint32: StateFree, StateAttached, StateClosed
	CEntered = 8 // uint64: last sequence number entered
)

// Values of a rank's CState.
const (
	StateFree     = 0
	StateAttached = 1
	StateClosed   = 2
)

// Spec describes one kind of segment.
type Spec struct {
	Prefix  string // of error messages, e.g. "shm"
	Name    string // in "not a <Name> segment", e.g. "Strata"
	Magic   uint64
	Version uint32

	MaxRanks, MaxSlots         int
	MinSlotBytes, MaxSlotBytes int
	SlotWord                   string // what a slot is called in errors ("slot", "chunk")
	// MaxHeapBytes bounds each rank's heap; 0: no heaps (and no header
	// field for their size).
	MaxHeapBytes int
	HHeapBytes   int // header offset of the heap size, when MaxHeapBytes > 0
	HReason      int // header offset of the abort reason (up to Page)

	CtlBytes int                    // per rank
	Flags    func(n, slots int) int // flags for n ranks and slots slots
	// LimitRAM refuses segments over half of the machine's memory (a
	// memfd has no size limit of its own: the reservation would run into
	// the OOM killer).
	LimitRAM bool
}

func (sp *Spec) maxReason() int { return Page - sp.HReason }

// Layout locates the regions of a segment: header, per-rank control,
// flags, then the data (per rank Slots input slots, then Slots result
// slots), then the per-rank heaps.
type Layout struct {
	N, Slots, SlotBytes int
	Heap                int // bytes per rank
	CtlOff              int
	FlagOff             int
	NFlags              int
	DataOff             int
	HeapOff             int
	Size                int
}

// AlignUp rounds x up to a multiple of a.
func AlignUp(x, a int) int { return (x + a - 1) / a * a }

// NewLayout checks the bounds of sp and lays out a segment.
func NewLayout(sp *Spec, n, slots, slotBytes, heap int) (Layout, error) {
	if heap < 0 || heap > sp.MaxHeapBytes || heap%Page != 0 {
		return Layout{}, fmt.Errorf("%s: heap of %d bytes per rank, want a multiple of %d up to %d", sp.Prefix, heap, Page, sp.MaxHeapBytes)
	}
	if n < 1 || n > sp.MaxRanks {
		return Layout{}, fmt.Errorf("%s: %d ranks, want 1..%d", sp.Prefix, n, sp.MaxRanks)
	}
	if slots < 2 || slots > sp.MaxSlots {
		return Layout{}, fmt.Errorf("%s: %d slots, want 2..%d", sp.Prefix, slots, sp.MaxSlots)
	}
	if slotBytes < sp.MinSlotBytes || slotBytes > sp.MaxSlotBytes || slotBytes%Page != 0 {
		return Layout{}, fmt.Errorf("%s: %s of %d bytes, want a multiple of %d in [%d, %d]", sp.Prefix, sp.SlotWord, slotBytes, Page, sp.MinSlotBytes, sp.MaxSlotBytes)
	}
	if slotBytes < 64*n {
		return Layout{}, fmt.Errorf("%s: %s of %d bytes is too small for %d ranks (at least %d)", sp.Prefix, sp.SlotWord, slotBytes, n, 64*n)
	}
	l := Layout{N: n, Slots: slots, SlotBytes: slotBytes, Heap: heap}
	l.CtlOff = Page
	l.FlagOff = AlignUp(l.CtlOff+n*sp.CtlBytes, Page)
	l.NFlags = sp.Flags(n, slots)
	l.DataOff = AlignUp(l.FlagOff+l.NFlags*FlagSize, Page)
	data := int64(n+1) * int64(slots) * int64(slotBytes)
	heaps := int64(n) * int64(heap)
	if data+heaps > 1<<42 {
		return Layout{}, fmt.Errorf("%s: segment of %d bytes is too large", sp.Prefix, data+heaps)
	}
	l.HeapOff = l.DataOff + int(data)
	l.Size = l.HeapOff + int(heaps)
	return l, nil
}

// Seg is one rank's mapping of a segment.
type Seg struct {
	Spec *Spec
	L    Layout
	Mem  []byte
}

// U32 and U64 address the words at off.
func (s *Seg) U32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.Mem[off])) }
func (s *Seg) U64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.Mem[off])) }

// Ctl is the offset of rank r's control block.
func (s *Seg) Ctl(r int) int { return s.L.CtlOff + r*s.Spec.CtlBytes }

// Flag i is {value, waiters} at the start of its cache line.
func (s *Seg) Flag(i int) *uint32 { return s.U32(s.L.FlagOff + i*FlagSize) }

// InSlot is rank r's input slot.
func (s *Seg) InSlot(r, slot int) []byte {
	off := s.L.DataOff + (r*s.L.Slots+slot)*s.L.SlotBytes
	return s.Mem[off : off+s.L.SlotBytes : off+s.L.SlotBytes]
}

// ResSlot is a result slot.
func (s *Seg) ResSlot(slot int) []byte {
	off := s.L.DataOff + (s.L.N*s.L.Slots+slot)*s.L.SlotBytes
	return s.Mem[off : off+s.L.SlotBytes : off+s.L.SlotBytes]
}

// Data is the region holding every slot.
func (s *Seg) Data() []byte { return s.Mem[s.L.DataOff:s.L.HeapOff] }

// Heap returns rank r's heap.
func (s *Seg) Heap(r int) []byte {
	off := s.L.HeapOff + r*s.L.Heap
	return s.Mem[off : off+s.L.Heap : off+s.L.Heap]
}

func mapFile(f *os.File, size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// Init sizes f for l and writes the header.
func Init(f *os.File, sp *Spec, l Layout) error {
	if err := f.Truncate(int64(l.Size)); err != nil {
		return fmt.Errorf("%s: sizing the segment to %d bytes: %w", sp.Prefix, l.Size, err)
	}
	if sp.LimitRAM {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			if total := uint64(si.Totalram) * uint64(si.Unit); total > 0 && uint64(l.Size) > total/2 {
				return fmt.Errorf("%s: a segment of %d bytes is more than half of this machine's %d bytes of memory: %w", sp.Prefix, l.Size, total, unix.ENOSPC)
			}
		}
	}
	// Reserve the memory now: on a full tmpfs (a small /dev/shm) this
	// fails here with ENOSPC instead of killing a rank with SIGBUS later.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(l.Size)); err != nil && err != unix.EOPNOTSUPP {
		return fmt.Errorf("%s: reserving %d bytes for the segment (is /dev/shm large enough?): %w", sp.Prefix, l.Size, err)
	}
	mem, err := mapFile(f, Page)
	if err != nil {
		return fmt.Errorf("%s: mapping the segment: %w", sp.Prefix, err)
	}
	defer unix.Munmap(mem)
	binary.LittleEndian.PutUint32(mem[HVersion:], sp.Version)
	binary.LittleEndian.PutUint32(mem[HRanks:], uint32(l.N))
	binary.LittleEndian.PutUint32(mem[HSlots:], uint32(l.Slots))
	binary.LittleEndian.PutUint32(mem[HSlotBytes:], uint32(l.SlotBytes))
	binary.LittleEndian.PutUint64(mem[HSegBytes:], uint64(l.Size))
	if sp.MaxHeapBytes > 0 {
		binary.LittleEndian.PutUint64(mem[sp.HHeapBytes:], uint64(l.Heap))
	}
	// The magic last: a segment without it is not initialized.
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[HMagic])), sp.Magic)
	return nil
}

// Attach maps an initialized segment as rank of n and validates its
// header.
func Attach(f *os.File, sp *Spec, rank, n int) (*Seg, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < Page {
		return nil, fmt.Errorf("%s: segment has %d bytes, not initialized", sp.Prefix, fi.Size())
	}
	hdr, err := mapFile(f, Page)
	if err != nil {
		return nil, fmt.Errorf("%s: mapping the header: %w", sp.Prefix, err)
	}
	magic := atomic.LoadUint64((*uint64)(unsafe.Pointer(&hdr[HMagic])))
	ver := binary.LittleEndian.Uint32(hdr[HVersion:])
	hn, hk := int(binary.LittleEndian.Uint32(hdr[HRanks:])), int(binary.LittleEndian.Uint32(hdr[HSlots:]))
	hs, size := int(binary.LittleEndian.Uint32(hdr[HSlotBytes:])), binary.LittleEndian.Uint64(hdr[HSegBytes:])
	var hh uint64
	if sp.MaxHeapBytes > 0 {
		hh = binary.LittleEndian.Uint64(hdr[sp.HHeapBytes:])
	}
	unix.Munmap(hdr)
	if magic != sp.Magic {
		return nil, fmt.Errorf("%s: not a %s segment (magic %#x)", sp.Prefix, sp.Name, magic)
	}
	if ver != sp.Version {
		return nil, fmt.Errorf("%s: segment version %d, want %d", sp.Prefix, ver, sp.Version)
	}
	if hn != n {
		return nil, fmt.Errorf("%s: segment is for %d ranks, this job has %d", sp.Prefix, hn, n)
	}
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("%s: rank %d out of range [0, %d)", sp.Prefix, rank, n)
	}
	if hh > uint64(sp.MaxHeapBytes) {
		return nil, fmt.Errorf("%s: heap of %d bytes in the header", sp.Prefix, hh)
	}
	l, err := NewLayout(sp, hn, hk, hs, int(hh))
	if err != nil {
		return nil, err
	}
	if uint64(l.Size) != size || fi.Size() != int64(l.Size) {
		return nil, fmt.Errorf("%s: segment size %d (header says %d), layout needs %d", sp.Prefix, fi.Size(), size, l.Size)
	}
	mem, err := mapFile(f, l.Size)
	if err != nil {
		return nil, fmt.Errorf("%s: mapping %d bytes: %w", sp.Prefix, l.Size, err)
	}
	s := &Seg{Spec: sp, L: l, Mem: mem}
	c := s.Ctl(rank)
	if !atomic.CompareAndSwapUint32(s.U32(c+CState), StateFree, StateAttached) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s: rank %d is already attached to this segment (two processes with the same RANK?)", sp.Prefix, rank)
	}
	atomic.StoreInt32((*int32)(unsafe.Pointer(&s.Mem[c+CPid])), int32(os.Getpid()))
	atomic.AddUint32(s.U32(HAttached), 1)
	Wake32(s.U32(HAttached))
	return s, nil
}

// WaitAttached waits until all ranks have attached, naming those that
// have not at the deadline.
func (s *Seg) WaitAttached(ctx context.Context) error {
	a := s.U32(HAttached)
	for {
		v := atomic.LoadUint32(a)
		if int(v) >= s.L.N {
			return nil
		}
		dl, ok := ctx.Deadline()
		if ctx.Err() != nil || (ok && time.Until(dl) <= 0) {
			var missing []int
			for r := 0; r < s.L.N; r++ {
				if atomic.LoadUint32(s.U32(s.Ctl(r)+CState)) == StateFree {
					missing = append(missing, r)
				}
			}
			return fmt.Errorf("%s: ranks %v never attached to the segment: %w", s.Spec.Prefix, missing, context.DeadlineExceeded)
		}
		d := 50 * time.Millisecond
		if ok {
			d = min(d, time.Until(dl))
		}
		Wait32(a, v, max(d, time.Millisecond))
	}
}

// CheckAbort returns the *comm.AbortError published in the segment, if
// any (waiting while it is being written).
func (s *Seg) CheckAbort() error {
	a := s.U32(HAbort)
	st := atomic.LoadUint32(a)
	if st == 0 {
		return nil
	}
	for st == 1 {
		time.Sleep(time.Millisecond)
		st = atomic.LoadUint32(a)
	}
	m := s.Mem
	ae := &comm.AbortError{By: int(atomic.LoadInt32((*int32)(unsafe.Pointer(&m[HAbortBy])))), Seq: atomic.LoadUint64(s.U64(HAbortSeq))}
	for r := 0; r < s.L.N; r++ {
		if m[HMissing+r/8]&(1<<(r%8)) != 0 {
			ae.Missing = append(ae.Missing, r)
		}
	}
	l := min(int(atomic.LoadUint32(s.U32(HAbortLen))), s.Spec.maxReason())
	ae.Reason = string(m[s.Spec.HReason : s.Spec.HReason+l])
	return ae
}

// PublishAbort records oe as rank's abort and wakes every sleeper,
// unless another abort was published first.
func (s *Seg) PublishAbort(rank int, oe *comm.OpError) {
	a := s.U32(HAbort)
	if !atomic.CompareAndSwapUint32(a, 0, 1) {
		return // someone else aborted first
	}
	m := s.Mem
	atomic.StoreInt32((*int32)(unsafe.Pointer(&m[HAbortBy])), int32(rank))
	atomic.StoreUint64(s.U64(HAbortSeq), oe.Seq)
	for _, r := range oe.Missing {
		if r >= 0 && r < s.L.N {
			m[HMissing+r/8] |= 1 << (r % 8)
		}
	}
	l := copy(m[s.Spec.HReason:s.Spec.HReason+s.Spec.maxReason()], oe.Error())
	atomic.StoreUint32(s.U32(HAbortLen), uint32(l))
	atomic.StoreUint32(a, 2)
	s.WakeAll()
}

// WakeAll wakes every sleeper in the segment.
func (s *Seg) WakeAll() {
	for i := 0; i < s.L.NFlags; i++ {
		f := s.Flag(i)
		if atomic.LoadUint32(Waiters(f)) != 0 {
			Wake32(f)
		}
	}
	Wake32(s.U32(HAttached))
}

// Unmap releases the mapping (once; later calls do nothing).
func (s *Seg) Unmap() {
	if s.Mem != nil {
		unix.Munmap(s.Mem)
		s.Mem = nil
	}
}
