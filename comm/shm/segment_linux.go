//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Bounds checked when a segment is created or attached.
const (
	MaxRanks     = 1024
	MaxSlots     = 256
	MaxSlotBytes = 64 << 20
	minSlotBytes = 4096

	segMagic   = 0x4853415441525453 // "STRATASH"
	segVersion = 2
	// MaxHeapBytes bounds each rank's heap.
	MaxHeapBytes = 1 << 40

	page     = 4096
	ctlBytes = 256 // per rank
	flagSize = 64  // one counter per cache line
)

// Header field offsets.
const (
	hMagic     = 0
	hVersion   = 8
	hRanks     = 12
	hSlots     = 16
	hSlotBytes = 20
	hSegBytes  = 24
	hAttached  = 32 // futex word: ranks attached
	hAbort     = 36 // futex word: 0 none, 1 being written, 2 published
	hAbortBy   = 40
	hAbortSeq  = 48
	hAbortLen  = 56 // reason length
	hMissing   = 64 // bitmap of missing ranks, MaxRanks bits
	hHeapBytes = 192
	hReason    = 256
	maxReason  = page - hReason
)

// Per-rank control fields (offsets within the rank's ctlBytes).
const (
	cPid     = 0  // int32
	cState   = 4  // uint32: 0 free, 1 attached, 2 closed
	cEntered = 8  // uint64: last sequence number entered
	cDone    = 16 // uint64: last sequence number finished (or failed)
	cExch    = 64 // two sets (by parity) of exchWords int64 values
)

const exchWords = 4

const (
	stateFree     = 0
	stateAttached = 1
	stateClosed   = 2
)

// layout locates the regions of a segment.
type layout struct {
	n, k, slot int
	heap       int // bytes per rank
	ctlOff     int
	flagOff    int
	nflags     int
	dataOff    int
	heapOff    int
	size       int
}

func alignUp(x, a int) int { return (x + a - 1) / a * a }

func newLayout(n, k, slot, heap int) (layout, error) {
	if heap < 0 || heap > MaxHeapBytes || heap%page != 0 {
		return layout{}, fmt.Errorf("shm: heap of %d bytes per rank, want a multiple of %d up to %d", heap, page, MaxHeapBytes)
	}
	if n < 1 || n > MaxRanks {
		return layout{}, fmt.Errorf("shm: %d ranks, want 1..%d", n, MaxRanks)
	}
	if k < 2 || k > MaxSlots {
		return layout{}, fmt.Errorf("shm: %d slots, want 2..%d", k, MaxSlots)
	}
	if slot < minSlotBytes || slot > MaxSlotBytes || slot%page != 0 {
		return layout{}, fmt.Errorf("shm: slot of %d bytes, want a multiple of %d in [%d, %d]", slot, page, minSlotBytes, MaxSlotBytes)
	}
	if slot < 64*n {
		return layout{}, fmt.Errorf("shm: slot of %d bytes is too small for %d ranks (at least %d)", slot, n, 64*n)
	}
	l := layout{n: n, k: k, slot: slot, heap: heap}
	l.ctlOff = page
	l.flagOff = alignUp(l.ctlOff+n*ctlBytes, page)
	l.nflags = 2*n*k + k + n
	l.dataOff = alignUp(l.flagOff+l.nflags*flagSize, page)
	data := int64(n+1) * int64(k) * int64(slot)
	heaps := int64(n) * int64(heap)
	if data+heaps > 1<<42 {
		return layout{}, fmt.Errorf("shm: segment of %d bytes is too large", data+heaps)
	}
	l.heapOff = l.dataOff + int(data)
	l.size = l.heapOff + int(heaps)
	return l, nil
}

// segment is one rank's mapping.
type segment struct {
	l   layout
	mem []byte
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) ctl(r int) int { return s.l.ctlOff + r*ctlBytes }

// flag i is {value, waiters} at the start of its cache line.
func (s *segment) flag(i int) *uint32 { return s.u32(s.l.flagOff + i*flagSize) }

func (s *segment) inFlag(r, slot int) *uint32  { return s.flag(r*s.l.k + slot) }
func (s *segment) resFlag(slot int) *uint32    { return s.flag(s.l.n*s.l.k + slot) }
func (s *segment) outFlag(r, slot int) *uint32 { return s.flag(s.l.n*s.l.k + s.l.k + r*s.l.k + slot) }
func (s *segment) barFlag(r int) *uint32       { return s.flag(2*s.l.n*s.l.k + s.l.k + r) }

func (s *segment) inSlot(r, slot int) []byte {
	off := s.l.dataOff + (r*s.l.k+slot)*s.l.slot
	return s.mem[off : off+s.l.slot : off+s.l.slot]
}

// heap returns rank r's heap.
func (s *segment) heap(r int) []byte {
	off := s.l.heapOff + r*s.l.heap
	return s.mem[off : off+s.l.heap : off+s.l.heap]
}

func (s *segment) resSlot(slot int) []byte {
	off := s.l.dataOff + (s.l.n*s.l.k+slot)*s.l.slot
	return s.mem[off : off+s.l.slot : off+s.l.slot]
}

// waiters is the word after a flag's value.
func waiters(f *uint32) *uint32 { return (*uint32)(unsafe.Add(unsafe.Pointer(f), 4)) }

// set publishes v and wakes sleepers.
func set(f *uint32, v uint32) {
	atomic.StoreUint32(f, v)
	if atomic.LoadUint32(waiters(f)) != 0 {
		wake32(f)
	}
}

// reached reports v >= want on a wrapping counter.
func reached(v, want uint32) bool { return int32(v-want) >= 0 }

func mapFile(f *os.File, size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// initSegment sizes f and writes the header.
func initSegment(f *os.File, l layout) error {
	if err := f.Truncate(int64(l.size)); err != nil {
		return fmt.Errorf("shm: sizing the segment to %d bytes: %w", l.size, err)
	}
	// Never try to reserve more than the machine has (a memfd has no size
	// limit of its own: the reservation would run into the OOM killer).
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		if total := uint64(si.Totalram) * uint64(si.Unit); total > 0 && uint64(l.size) > total/2 {
			return fmt.Errorf("shm: a segment of %d bytes is more than half of this machine's %d bytes of memory: %w", l.size, total, unix.ENOSPC)
		}
	}
	// Reserve the memory now: on a full tmpfs (a small /dev/shm) this
	// fails here with ENOSPC instead of killing a rank with SIGBUS later.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(l.size)); err != nil && err != unix.EOPNOTSUPP {
		return fmt.Errorf("shm: reserving %d bytes for the segment (is /dev/shm large enough?): %w", l.size, err)
	}
	mem, err := mapFile(f, page)
	if err != nil {
		return fmt.Errorf("shm: mapping the segment: %w", err)
	}
	defer unix.Munmap(mem)
	binary.LittleEndian.PutUint32(mem[hVersion:], segVersion)
	binary.LittleEndian.PutUint32(mem[hRanks:], uint32(l.n))
	binary.LittleEndian.PutUint32(mem[hSlots:], uint32(l.k))
	binary.LittleEndian.PutUint32(mem[hSlotBytes:], uint32(l.slot))
	binary.LittleEndian.PutUint64(mem[hSegBytes:], uint64(l.size))
	binary.LittleEndian.PutUint64(mem[hHeapBytes:], uint64(l.heap))
	// The magic last: a segment without it is not initialized.
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[hMagic])), segMagic)
	return nil
}

// attach maps an initialized segment as rank and validates its header.
func attach(f *os.File, rank, n int) (*segment, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < page {
		return nil, fmt.Errorf("shm: segment has %d bytes, not initialized", fi.Size())
	}
	hdr, err := mapFile(f, page)
	if err != nil {
		return nil, fmt.Errorf("shm: mapping the header: %w", err)
	}
	magic := atomic.LoadUint64((*uint64)(unsafe.Pointer(&hdr[hMagic])))
	ver := binary.LittleEndian.Uint32(hdr[hVersion:])
	hn, hk := int(binary.LittleEndian.Uint32(hdr[hRanks:])), int(binary.LittleEndian.Uint32(hdr[hSlots:]))
	hs, size := int(binary.LittleEndian.Uint32(hdr[hSlotBytes:])), binary.LittleEndian.Uint64(hdr[hSegBytes:])
	hh := binary.LittleEndian.Uint64(hdr[hHeapBytes:])
	unix.Munmap(hdr)
	if magic != segMagic {
		return nil, fmt.Errorf("shm: not a Strata segment (magic %#x)", magic)
	}
	if ver != segVersion {
		return nil, fmt.Errorf("shm: segment version %d, want %d", ver, segVersion)
	}
	if hn != n {
		return nil, fmt.Errorf("shm: segment is for %d ranks, this job has %d", hn, n)
	}
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("shm: rank %d out of range [0, %d)", rank, n)
	}
	if hh > MaxHeapBytes {
		return nil, fmt.Errorf("shm: heap of %d bytes in the header", hh)
	}
	l, err := newLayout(hn, hk, hs, int(hh))
	if err != nil {
		return nil, err
	}
	if uint64(l.size) != size || fi.Size() != int64(l.size) {
		return nil, fmt.Errorf("shm: segment size %d (header says %d), layout needs %d", fi.Size(), size, l.size)
	}
	mem, err := mapFile(f, l.size)
	if err != nil {
		return nil, fmt.Errorf("shm: mapping %d bytes: %w", l.size, err)
	}
	s := &segment{l: l, mem: mem}
	c := s.ctl(rank)
	if !atomic.CompareAndSwapUint32(s.u32(c+cState), stateFree, stateAttached) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: rank %d is already attached to this segment (two processes with the same RANK?)", rank)
	}
	atomic.StoreInt32((*int32)(unsafe.Pointer(&s.mem[c+cPid])), int32(os.Getpid()))
	atomic.AddUint32(s.u32(hAttached), 1)
	wake32(s.u32(hAttached))
	return s, nil
}

// waitAttached waits until all ranks have attached, naming those that
// have not at the deadline.
func (s *segment) waitAttached(ctx context.Context) error {
	a := s.u32(hAttached)
	for {
		v := atomic.LoadUint32(a)
		if int(v) >= s.l.n {
			return nil
		}
		dl, ok := ctx.Deadline()
		if ctx.Err() != nil || (ok && time.Until(dl) <= 0) {
			var missing []int
			for r := 0; r < s.l.n; r++ {
				if atomic.LoadUint32(s.u32(s.ctl(r)+cState)) == stateFree {
					missing = append(missing, r)
				}
			}
			return fmt.Errorf("shm: ranks %v never attached to the segment: %w", missing, context.DeadlineExceeded)
		}
		d := 50 * time.Millisecond
		if ok {
			d = min(d, time.Until(dl))
		}
		wait32(a, v, max(d, time.Millisecond))
	}
}

func (s *segment) unmap() { unix.Munmap(s.mem) }
