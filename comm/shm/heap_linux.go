//go:build linux

package shm

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
)

// heapAlloc hands out pieces of this rank's heap (first fit, coalescing
// on free). Allocations are rounded up to heapAlign bytes.
type heapAlloc struct {
	mu   sync.Mutex
	base []byte
	free []span      // sorted by offset, no two adjacent
	used map[int]int // offset -> length
}

type span struct{ off, n int }

const heapAlign = 4096

func newHeap(base []byte) *heapAlloc {
	h := &heapAlloc{base: base, used: map[int]int{}}
	if len(base) > 0 {
		h.free = []span{{0, len(base)}}
	}
	return h
}

func (h *heapAlloc) alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("shm: Alloc of %d bytes", n)
	}
	size := sg.AlignUp(n, heapAlign)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, f := range h.free {
		if f.n < size {
			continue
		}
		if f.n == size {
			h.free = slices.Delete(h.free, i, i+1)
		} else {
			h.free[i] = span{f.off + size, f.n - size}
		}
		h.used[f.off] = size
		b := h.base[f.off : f.off+size : f.off+size]
		clear(b)
		return b[:n:n], nil
	}
	return nil, fmt.Errorf("shm: heap of %d bytes has no room for %d more", len(h.base), n)
}

func (h *heapAlloc) release(b []byte) error {
	if len(b) == 0 || len(h.base) == 0 {
		return comm.ErrNotAllocated
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(h.base)))
	if p < lo || p >= lo+uintptr(len(h.base)) {
		return comm.ErrNotAllocated
	}
	off := int(p - lo)
	h.mu.Lock()
	defer h.mu.Unlock()
	size, ok := h.used[off]
	if !ok {
		return fmt.Errorf("shm: Free of a buffer at heap offset %d that is not allocated (freed twice?)", off)
	}
	delete(h.used, off)
	i, _ := slices.BinarySearchFunc(h.free, off, func(s span, o int) int { return s.off - o })
	h.free = slices.Insert(h.free, i, span{off, size})
	// Coalesce with the neighbours.
	if i+1 < len(h.free) && h.free[i].off+h.free[i].n == h.free[i+1].off {
		h.free[i].n += h.free[i+1].n
		h.free = slices.Delete(h.free, i+1, i+2)
	}
	if i > 0 && h.free[i-1].off+h.free[i-1].n == h.free[i].off {
		h.free[i-1].n += h.free[i].n
		h.free = slices.Delete(h.free, i, i+1)
	}
	return nil
}
