package cuda

import (
	"fmt"
	"math/bits"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// AllocStats counts the caching allocator's work (backend.AllocStats):
// Mallocs and Frees count driver calls (cuMemAlloc, cuMemFree).
type AllocStats = backend.AllocStats

// OOMError is returned when device memory runs out even after the cache
// was released.
type OOMError struct {
	Device      string
	Requested   uint64
	Free, Total uint64
	Err         error
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("cuda: %s: out of device memory allocating %d bytes (%.2f GiB free of %.2f GiB after releasing the allocator cache); "+
		"lower the batch size or fan-outs, the hidden size, or the GPU feature/graph cache budget: %v",
		e.Device, e.Requested, float64(e.Free)/(1<<30), float64(e.Total)/(1<<30), e.Err)
}

func (e *OOMError) Unwrap() error { return e.Err }

// minBlock is the smallest block handed out; it also keeps every
// allocation 512-byte aligned for vector loads.
const minBlock = 512

// largeBlock is where size classes stop: larger blocks (feature tables,
// graph arrays: a few per run, each up to tens of GB) are rounded to
// largeStep only, since a 20% class step would waste gigabytes there.
const (
	largeBlock = 64 << 20
	largeStep  = 2 << 20
)

// classSize rounds n up to its size class: 512 bytes, then four classes
// per power of two (x1, x1.25, x1.5, x1.75), so a block wastes at most 20%;
// above largeBlock, a multiple of largeStep.
func classSize(n uint64) uint64 {
	if n <= minBlock {
		return minBlock
	}
	if n > largeBlock {
		return (n + largeStep - 1) / largeStep * largeStep
	}
	p := uint64(1) << (63 - bits.LeadingZeros64(n)) // largest power of two <= n
	if p == n {
		return n
	}
	step := p / 4
	c := (n + step - 1) / step * step
	return (c + minBlock - 1) / minBlock * minBlock
}

// allocator is a caching device allocator: freed blocks go to a free list
// per size class and are reused without driver calls. All work of a Device
// runs on one stream, so a block freed by the host can be handed out again
// at once: later kernels that reuse it are queued behind earlier ones that
// used it. Callers hold the Device lock.
type allocator struct {
	free  map[uint64][]cu.DevPtr
	stats AllocStats
	sync  func() error // synchronizes the stream before blocks are released to the driver
	name  string
}

func (a *allocator) get(bytes uint64) (cu.DevPtr, uint64, error) {
	size := classSize(bytes)
	if len(a.free[size]) > 0 {
		return a.reuse(size), size, nil
	}
	if size > largeBlock {
		if fit := a.bestFit(size); fit != 0 {
			return a.reuse(fit), fit, nil
		}
	}
	a.stats.Misses++
	p, err := cu.MemAlloc(size)
	if cu.IsCode(err, cu.ErrOutOfMemory) {
		a.stats.Retries++
		if rerr := a.release(); rerr != nil {
			return 0, 0, rerr
		}
		p, err = cu.MemAlloc(size)
	}
	if err != nil {
		if cu.IsCode(err, cu.ErrOutOfMemory) {
			free, total, _ := cu.MemGetInfo()
			return 0, 0, &OOMError{Device: a.name, Requested: size, Free: free, Total: total, Err: err}
		}
		return 0, 0, err
	}
	a.stats.Mallocs++
	a.stats.InUseBytes += int64(size)
	a.stats.PeakBytes = max(a.stats.PeakBytes, a.stats.InUseBytes+a.stats.CachedBytes)
	return p, size, nil
}

// reuse hands out the last cached block of size.
func (a *allocator) reuse(size uint64) cu.DevPtr {
	l := a.free[size]
	p := l[len(l)-1]
	a.free[size] = l[:len(l)-1]
	a.stats.Hits++
	a.stats.CachedBytes -= int64(size)
	a.stats.InUseBytes += int64(size)
	return p
}

// bestFit returns the smallest cached block size above size by at most a
// quarter, 0 if none: large blocks are rounded to largeStep only, so
// buffers whose sizes vary a little from use to use (an inference
// chunk's staging, gigabytes each) would otherwise never find their
// predecessors' blocks, and the cache would fill until an allocation
// fails and releases it all.
func (a *allocator) bestFit(size uint64) uint64 {
	best := uint64(0)
	for s, l := range a.free {
		if len(l) > 0 && s > size && s-size <= size/4 && (best == 0 || s < best) {
			best = s
		}
	}
	return best
}

func (a *allocator) put(p cu.DevPtr, size uint64) {
	if a.free == nil {
		a.free = map[uint64][]cu.DevPtr{}
	}
	a.free[size] = append(a.free[size], p)
	a.stats.InUseBytes -= int64(size)
	a.stats.CachedBytes += int64(size)
}

// release returns every cached block to the driver.
func (a *allocator) release() error {
	if a.sync != nil {
		if err := a.sync(); err != nil {
			return err
		}
	}
	var first error
	for size, l := range a.free {
		for _, p := range l {
			if err := cu.MemFree(p); err != nil && first == nil {
				first = err
			}
			a.stats.Frees++
			a.stats.CachedBytes -= int64(size)
		}
		delete(a.free, size)
	}
	return first
}
