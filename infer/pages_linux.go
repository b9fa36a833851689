//go:build linux

package infer

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-gnn/strata/graph"
)

// Linux madvise advice (MADV_POPULATE_*: Linux 5.14).
const (
	madvPopulateRead  = 22
	madvPopulateWrite = 23
)

// minPrepare is the smallest host output prepareOutput works on: below
// it, its page faults cost little.
const minPrepare = 64 << 20

// minMapped is the smallest host output hostFloats maps outside Go's
// heap (a variable for the tests).
var minMapped = 256 << 20

// hostFloats returns n zeroed float32s. From minMapped bytes they are an
// anonymous mapping of fresh pages and unmap frees them: Go's allocator
// zeroes a large object on one core whenever its pages were used before
// (after a run's garbage has cycled through the heap: 62 s for
// papers100M's 113 GB output), while the kernel hands out zero pages,
// which prepareOutput faults in on many cores. Below it, or when the
// mapping fails, Go memory and a nil unmap.
func hostFloats(n int) (x []float32, unmap func()) { return hostSlice[float32](n, false) }

// hostWords returns n zeroed words as hostFloats does, mapped from
// minMapped bytes in transparent huge pages: a chunk builder's scratch
// (a word a node, read at random once an edge; with THP in "madvise"
// mode Go's heap gets 4-KiB pages, and a random read of a 888 MB
// array then took twice as long, on a TLB miss each).
func hostWords(n int) (x []uint64, unmap func()) { return hostSlice[uint64](n, true) }

func hostSlice[T float32 | uint64](n int, huge bool) (x []T, unmap func()) {
	size := n * int(unsafe.Sizeof(T(0)))
	if size < minMapped || size == 0 {
		return make([]T, n), nil
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]T, n), nil
	}
	if huge {
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
	var once sync.Once
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), func() { once.Do(func() { _ = unix.Munmap(b) }) }
}

// prepareOutput readies x, a fresh host output every row of which the
// chunks will write, for them: it asks for transparent huge pages (THP
// "madvise" mode: a 4-KiB page fault each 4 KiB otherwise, 27M of them
// for papers100M's 113 GB output, taken by the devices' downloads) and
// populates the pages for writing in the background from workers
// goroutines, parts interleaved over parts slices of x (the devices'
// ranges), overlapping the first chunks. MADV_POPULATE_WRITE faults the
// pages in without writing them, so it never races with the chunks'
// writes. Errors are ignored (old kernels, no THP): the pages fault in
// as they are written. stop ends the population early and waits for it.
func prepareOutput(x []float32, parts, workers int) (stop func()) {
	if len(x)*4 < minPrepare {
		return func() {}
	}
	mem := pagesOf(unsafe.Pointer(&x[0]), len(x)*4)
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	return populate([][]byte{mem}, madvPopulateWrite, parts, workers)
}

// prefetch maps the pages of the arrays every layer reads (the
// in-adjacency, the dense features) in the background from workers
// goroutines: mapped from a file, each 4-KiB page would otherwise fault
// on its first read, in the chunk builders' and the first upload's
// threads. MADV_POPULATE_READ reads them without changing them; errors
// are ignored (old kernels). stop ends it early and waits for it.
func prefetch(in *graph.CSR, dense []float32, workers int) (stop func()) {
	var mems [][]byte
	add := func(p unsafe.Pointer, n int) {
		if n >= minPrepare {
			mems = append(mems, pagesOf(p, n))
		}
	}
	if len(in.Indptr) > 0 {
		add(unsafe.Pointer(&in.Indptr[0]), 8*len(in.Indptr))
	}
	if len(in.Indices) > 0 {
		add(unsafe.Pointer(&in.Indices[0]), 4*len(in.Indices))
	}
	if len(dense) > 0 {
		add(unsafe.Pointer(&dense[0]), 4*len(dense))
	}
	if len(mems) == 0 {
		return func() {}
	}
	return populate(mems, madvPopulateRead, 1, workers)
}

// pagesOf returns the whole pages within n bytes from p.
func pagesOf(p unsafe.Pointer, n int) []byte {
	const page = 4096
	all := unsafe.Slice((*byte)(p), n)
	off := min(int(-uintptr(p)&(page-1)), n) // to the first whole page
	return all[off : off+(n-off)&^(page-1)]
}

// populate applies advice to each of mems in steps of 64 MiB from
// workers goroutines, each of mems cut into parts interleaved (step i
// of part 0, of part 1, ..., then step i+1), until done or stopped; the
// first failing call ends its goroutine.
func populate(mems [][]byte, advice, parts, workers int) (stop func()) {
	const step = 64 << 20 // bytes a call, a multiple of the huge page
	parts = max(1, parts)
	var spans [][]byte // one per step, in the order they are taken
	for _, mem := range mems {
		part := (len(mem)/parts + step - 1) / step * step
		if part == 0 {
			continue
		}
		for i := range (part / step) * parts {
			lo := (i%parts)*part + (i/parts)*step // step i/parts of part i%parts
			hi := min(lo+step, (i%parts+1)*part, len(mem))
			if lo < hi {
				spans = append(spans, mem[lo:hi])
			}
		}
	}
	var next atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for !done.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(spans) {
					return
				}
				if unix.Madvise(spans[i], advice) != nil {
					return // not supported: the pages fault in when used
				}
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}
