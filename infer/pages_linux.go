//go:build linux

package infer

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Linux madvise advice (not in package syscall).
const (
	madvHugepage      = 14
	madvPopulateWrite = 23 // Linux 5.14
)

// minPrepare is the smallest host output prepareOutput works on: below
// it, its page faults cost little.
const minPrepare = 64 << 20

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
	const page = 4096
	all := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*4)
	off := int(-uintptr(unsafe.Pointer(&x[0])) & (page - 1)) // to the first whole page
	mem := all[off : off+(len(all)-off)&^(page-1)]
	_ = syscall.Madvise(mem, madvHugepage)
	const step = 64 << 20 // bytes a call, a multiple of the huge page
	parts = max(1, parts)
	part := (len(mem)/parts + step - 1) / step * step
	steps := (part / step) * parts
	var next atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for !done.Load() {
				i := int(next.Add(1) - 1)
				if i >= steps {
					return
				}
				lo := (i%parts)*part + (i/parts)*step // step i/parts of part i%parts
				hi := min(lo+step, (i%parts+1)*part, len(mem))
				if lo < hi && syscall.Madvise(mem[lo:hi], madvPopulateWrite) != nil {
					return // not supported: the pages fault in as written
				}
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}
