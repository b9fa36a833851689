//go:build linux

package gpushm

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Bounds checked when a segment is created or attached.
const (
	MaxRanks      = 256
	MaxSlots      = 64
	MaxChunkBytes = 64 << 20
	minChunkBytes = 64 << 10

	segMagic   = 0x4d48535550475453 // "STGPUSHM"
	segVersion = 1

	page     = 4096
	ctlBytes = 64
	flagSize = 64
)

// Header fields.
const (
	hMagic     = 0
	hVersion   = 8
	hRanks     = 12
	hSlots     = 16
	hChunk     = 20
	hSegBytes  = 24
	hAttached  = 32 // futex word: ranks attached
	hAbort     = 36 // 0 none, 1 being written, 2 published
	hAbortBy   = 40
	hAbortSeq  = 48
	hAbortLen  = 56
	hMissing   = 64 // bitmap, MaxRanks bits
	hReason    = 128
	maxReason  = page - hReason
	hEndFields = hMissing + MaxRanks/8
)

// Per-rank control fields.
const (
	cPid     = 0  // int32
	cState   = 4  // uint32
	cEntered = 8  // uint64: last sequence number entered
	cLeft    = 16 // uint64: last sequence number completed before Close
)

const (
	stateFree     = 0
	stateAttached = 1
	stateClosed   = 2
)

// layout locates the regions of a segment: header, per-rank control,
// flags (in, red, done per rank and slot), then the data: per rank `slots`
// input chunks, then `slots` result chunks.
type layout struct {
	n, slots, chunk int
	ctlOff, flagOff int
	nflags          int
	dataOff, size   int
}

func alignUp(x, a int) int { return (x + a - 1) / a * a }

func newLayout(n, slots, chunk int) (layout, error) {
	if n < 1 || n > MaxRanks {
		return layout{}, fmt.Errorf("gpushm: %d ranks, want 1..%d", n, MaxRanks)
	}
	if slots < 2 || slots > MaxSlots {
		return layout{}, fmt.Errorf("gpushm: %d slots, want 2..%d", slots, MaxSlots)
	}
	if chunk < minChunkBytes || chunk > MaxChunkBytes || chunk%page != 0 {
		return layout{}, fmt.Errorf("gpushm: chunk of %d bytes, want a multiple of %d in [%d, %d]", chunk, page, minChunkBytes, MaxChunkBytes)
	}
	l := layout{n: n, slots: slots, chunk: chunk}
	l.ctlOff = page
	l.flagOff = alignUp(l.ctlOff+n*ctlBytes, page)
	l.nflags = 3 * n * slots
	l.dataOff = alignUp(l.flagOff+l.nflags*flagSize, page)
	l.size = l.dataOff + (n+1)*slots*chunk
	return l, nil
}

// segment is one rank's mapping.
type segment struct {
	l   layout
	mem []byte
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) ctl(r int) int       { return s.l.ctlOff + r*ctlBytes }

func (s *segment) flag(i int) *uint32 { return s.u32(s.l.flagOff + i*flagSize) }

// inFlag(r, s): rank r's chunk in input slot s has arrived (use u: u+1).
func (s *segment) inFlag(r, slot int) *uint32 { return s.flag(r*s.l.slots + slot) }

// redFlag(r, s): rank r has reduced its share of the chunk in slot s.
func (s *segment) redFlag(r, slot int) *uint32 { return s.flag((s.l.n+r)*s.l.slots + slot) }

// doneFlag(r, s): rank r has copied the result of slot s back to its
// device (so the slot may be reused).
func (s *segment) doneFlag(r, slot int) *uint32 { return s.flag((2*s.l.n+r)*s.l.slots + slot) }

func (s *segment) inSlot(r, slot int) []byte {
	off := s.l.dataOff + (r*s.l.slots+slot)*s.l.chunk
	return s.mem[off : off+s.l.chunk : off+s.l.chunk]
}

func (s *segment) resSlot(slot int) []byte {
	off := s.l.dataOff + (s.l.n*s.l.slots+slot)*s.l.chunk
	return s.mem[off : off+s.l.chunk : off+s.l.chunk]
}

// data is the region holding every slot (registered with the device).
func (s *segment) data() []byte { return s.mem[s.l.dataOff:s.l.size] }

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

const (
	futexWait = 0
	futexWake = 1
)

func wait32(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func wake32(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<30), 0, 0, 0)
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return true
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return !(i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X'))
		}
	}
	return true
}

func mapFile(f *os.File, size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// initSegment sizes f and writes the header.
func initSegment(f *os.File, l layout) error {
	if err := f.Truncate(int64(l.size)); err != nil {
		return fmt.Errorf("gpushm: sizing the segment to %d bytes: %w", l.size, err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(l.size)); err != nil && err != unix.EOPNOTSUPP {
		return fmt.Errorf("gpushm: reserving %d bytes for the segment (is /dev/shm large enough?): %w", l.size, err)
	}
	mem, err := mapFile(f, page)
	if err != nil {
		return fmt.Errorf("gpushm: mapping the segment: %w", err)
	}
	defer unix.Munmap(mem)
	binary.LittleEndian.PutUint32(mem[hVersion:], segVersion)
	binary.LittleEndian.PutUint32(mem[hRanks:], uint32(l.n))
	binary.LittleEndian.PutUint32(mem[hSlots:], uint32(l.slots))
	binary.LittleEndian.PutUint32(mem[hChunk:], uint32(l.chunk))
	binary.LittleEndian.PutUint64(mem[hSegBytes:], uint64(l.size))
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
		return nil, fmt.Errorf("gpushm: segment has %d bytes, not initialized", fi.Size())
	}
	hdr, err := mapFile(f, page)
	if err != nil {
		return nil, fmt.Errorf("gpushm: mapping the header: %w", err)
	}
	magic := atomic.LoadUint64((*uint64)(unsafe.Pointer(&hdr[hMagic])))
	ver := binary.LittleEndian.Uint32(hdr[hVersion:])
	hn, hs := int(binary.LittleEndian.Uint32(hdr[hRanks:])), int(binary.LittleEndian.Uint32(hdr[hSlots:]))
	hc, size := int(binary.LittleEndian.Uint32(hdr[hChunk:])), binary.LittleEndian.Uint64(hdr[hSegBytes:])
	unix.Munmap(hdr)
	if magic != segMagic {
		return nil, fmt.Errorf("gpushm: not a Strata GPU segment (magic %#x)", magic)
	}
	if ver != segVersion {
		return nil, fmt.Errorf("gpushm: segment version %d, want %d", ver, segVersion)
	}
	if hn != n {
		return nil, fmt.Errorf("gpushm: segment is for %d ranks, this job has %d", hn, n)
	}
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("gpushm: rank %d out of range [0, %d)", rank, n)
	}
	l, err := newLayout(hn, hs, hc)
	if err != nil {
		return nil, err
	}
	if uint64(l.size) != size || fi.Size() != int64(l.size) {
		return nil, fmt.Errorf("gpushm: segment size %d (header says %d), layout needs %d", fi.Size(), size, l.size)
	}
	mem, err := mapFile(f, l.size)
	if err != nil {
		return nil, fmt.Errorf("gpushm: mapping %d bytes: %w", l.size, err)
	}
	s := &segment{l: l, mem: mem}
	c := s.ctl(rank)
	if !atomic.CompareAndSwapUint32(s.u32(c+cState), stateFree, stateAttached) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("gpushm: rank %d is already attached to this segment (two processes with the same RANK?)", rank)
	}
	atomic.StoreInt32((*int32)(unsafe.Pointer(&s.mem[c+cPid])), int32(os.Getpid()))
	atomic.AddUint32(s.u32(hAttached), 1)
	wake32(s.u32(hAttached))
	return s, nil
}

// waitAttached waits until all ranks have attached.
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
			return fmt.Errorf("gpushm: ranks %v never attached to the segment: %w", missing, context.DeadlineExceeded)
		}
		d := 50 * time.Millisecond
		if ok {
			d = min(d, time.Until(dl))
		}
		wait32(a, v, max(d, time.Millisecond))
	}
}

func (s *segment) unmap() {
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}
