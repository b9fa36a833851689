package backend

import (
	"errors"
	"fmt"
	"math"
)

// ErrOutOfMemory is matched (errors.Is) by the errors of back ends that
// ran out of device memory (the CUDA back end's *cuda.OOMError).
var ErrOutOfMemory = errors.New("out of device memory")

// Capabilities: small optional interfaces that some back ends implement
// beyond Backend. Code above the back ends discovers one with a type
// assertion to the interface, once, where it is set up (never to a
// concrete back-end type), and says which capability is missing when the
// assertion fails. The conformance suite checks each one a back end has
// (backendtest.Capabilities).
//
//	capability    what it gives                                   cpu  cuda
//	Slicer        views, truncation and overlap of buffers         yes  yes
//	Siblings      more handles of one device, each with own queue  yes  yes
//	Fences        marks in the queue, waited for without the lock  yes  yes
//	PinnedMemory  page-locked host memory, mapped for kernels      yes  yes
//	SparseBuilder a Sparse over CSR buffers already on the device  yes  yes
//	SparseAdopter a Sparse that keeps the host CSR arrays given it  yes  no
//	CSRBuffers    the buffers of a Sparse (on Sparse values)       yes  yes
//	Memory        free memory, allocator counters and cache        no   yes
//	Kernels       kernels compiled at run time, and launched       no   yes
//	Enqueuer      a batch of queued ops under the device's lock    no   yes
//	Fused         training-step chains in one pass, masks unstored yes  yes
//	BF16Activations bfloat16 activations in the step's primitives  yes  yes
//	Profiler      device time and count of every op queued         no   yes

// DevPtr is an address in a device's address space, as a kernel sees it:
// where a kernel reads mapped host memory (HostBuffer.DeviceAddr). 0 is
// no address.
type DevPtr uint64

// Slicer is implemented by the buffers (not the back ends) of back ends
// whose buffers can alias part of another: both back ends' buffers. Use
// View and Truncate, which say what is missing when a buffer cannot.
type Slicer interface {
	// Slice returns a buffer aliasing elements [off, off+n) of the
	// buffer: writes through either are seen by the other. It owns no
	// memory (freeing it does nothing) and must not be used after the
	// buffer is freed. A window outside the buffer is an error.
	Slice(off, n int) (Buffer, error)
	// Truncate shortens the buffer in place to its first n elements
	// (0 <= n <= Len()); its memory stays allocated until it is freed.
	// Samplers allocate for an upper bound and truncate once the device
	// reports the real size.
	Truncate(n int) error
	// Overlaps reports whether the buffer and other (a buffer of the
	// same back end, false for others) share memory.
	Overlaps(other Buffer) bool
}

// Overlap reports whether a and b share memory: they are the same
// buffer, or a's type implements Slicer and says they overlap.
func Overlap(a, b Buffer) bool {
	if a == nil || b == nil {
		return false
	}
	if a == b {
		return true
	}
	s, ok := a.(Slicer)
	return ok && s.Overlaps(b)
}

// View returns a buffer aliasing elements [off, off+n) of b (see
// Slicer.Slice).
func View(b Buffer, off, n int) (Buffer, error) {
	if b == nil {
		return nil, fmt.Errorf("backend: view [%d, %d+%d) of a nil buffer", off, off, n)
	}
	s, ok := b.(Slicer)
	if !ok {
		return nil, fmt.Errorf("backend: cannot take views of %T buffers", b)
	}
	if off < 0 || n < 0 || off > b.Len() || n > b.Len()-off {
		return nil, fmt.Errorf("backend: view [%d, %d+%d) of a %d-element buffer", off, off, n, b.Len())
	}
	return s.Slice(off, n)
}

// Truncate shortens b in place to its first n elements (see
// Slicer.Truncate).
func Truncate(b Buffer, n int) error {
	if b == nil {
		return fmt.Errorf("backend: truncate of a nil buffer to %d elements", n)
	}
	s, ok := b.(Slicer)
	if !ok {
		return fmt.Errorf("backend: cannot truncate %T buffers", b)
	}
	return s.Truncate(n)
}

// MeanWeighter is implemented by back ends that compute a sparse
// matrix's mean-aggregation weights in one pass, into a new buffer they
// write whole (no zero fill): per entry, 1/max(deg, 1) of its row in
// float32, which RowDegreeInv expanded by ExpandRowsToEdges gives too,
// bit for bit. The caller frees it.
type MeanWeighter interface {
	MeanEdgeWeights(a Sparse) (Buffer, error)
}

// ConcatAggregator is implemented by back ends that write a GraphSAGE
// layer's input for one product: SpMMConcat sets, for each row i of a
// (whose rows are the first rows of x, as a sampled block lists its
// destinations first among its sources),
//
//	out[i, 0:width]       = x[i, :]
//	out[i, width:2*width] = sum over entries (i, j) of w[e] x[j, :]
//
// out is a.NumRows() x 2*width, x a.NumCols() x width, both Float32 or
// both BFloat16; w is float32 per entry, or nil for ones. The sums are
// SpMM's (one head, not transposed), bit for bit, and x's rows are
// copied exactly, so [x_dst | A x] times [W_self; W_neigh] is the two
// products of the layer in one.
type ConcatAggregator interface {
	SpMMConcat(out Buffer, a Sparse, x, w Buffer, width int) error
}

// SpMMConcatShape checks an SpMMConcat on a rows x cols matrix and
// returns the lengths of out and x.
func SpMMConcatShape(op string, rows, cols, width int) (outLen, xLen int, err error) {
	if width < 1 || rows > cols {
		return 0, 0, &ShapeError{Op: op, Msg: fmt.Sprintf("%d x %d matrix, width %d: want width >= 1 and rows <= cols (destinations first among the sources)", rows, cols, width)}
	}
	if outLen, err = Dims(op, rows, 2*width); err != nil {
		return 0, 0, err
	}
	if xLen, err = Dims(op, cols, width); err != nil {
		return 0, 0, err
	}
	return outLen, xLen, nil
}

// SiblingOptions configure a handle opened by Siblings.Sibling.
type SiblingOptions struct {
	// HighPriority gives the handle's queue the device's greatest
	// scheduling priority, for short, latency-bound stages (sampling,
	// feature loading) that share the device with a trainer whose large
	// kernels would otherwise hold them back.
	HighPriority bool
}

// Sibling is a handle opened by Siblings.Sibling: a Backend of its own
// that Close releases (its queue and cached memory, not the device).
type Sibling interface {
	Backend
	Close() error
}

// Siblings is implemented by back ends that can open further handles of
// the same device, each with its own queue (a CUDA stream), lock and
// allocator, so that pipeline stages on one device do not wait for each
// other's work. All handles address the same memory.
type Siblings interface {
	// Sibling opens another handle of the device, with the same
	// settings as this one except those opt gives.
	Sibling(opt SiblingOptions) (Sibling, error)
	// SameDevice reports whether b is a handle of the same device as
	// this one (this one included).
	SameDevice(b Backend) bool
	// Owns reports whether b is a buffer of this handle (not of a
	// sibling, whose buffers this handle uses through Alias).
	Owns(b Buffer) bool
	// QueuePriority is the scheduling priority of this handle's queue:
	// 0 by default, lower (higher priority) for a HighPriority sibling
	// where the device has priorities.
	QueuePriority() int
	// Alias returns a buffer of this handle over the memory of src, a
	// buffer of another handle of the same device. It owns nothing
	// (freeing it does nothing). The caller orders the queues (src's
	// writes before this handle's reads) and frees src, on its own
	// handle, only after this handle is done with the alias.
	Alias(src Buffer) (Buffer, error)
}

// Fence marks a point in a device's queue. One mark at a time: Wait for
// it before recording it again. Not safe for concurrent use.
type Fence interface {
	// Record marks the current end of the queue (under the device's
	// lock; inside Enqueue use Queue.Mark).
	Record() error
	// Wait blocks until the work queued before the last mark has run,
	// without holding the device's lock, so that other users of the
	// device keep queueing work meanwhile.
	Wait() error
	// Close releases the fence.
	Close() error
}

// Fences is implemented by back ends that run work asynchronously and
// can wait for part of it. On the CPU back end, where every call
// completes before it returns, a fence is always reached.
type Fences interface {
	NewFence() (Fence, error)
}

// HostBuffer is host memory of a back end outside the Go heap's control:
// page-locked (pinned) on devices, so that copies from and to it are truly
// asynchronous, and, when mapped, read directly by kernels through the
// device's address space (zero-copy), for graphs and features larger than
// device memory. The slices are valid until Free.
type HostBuffer interface {
	Bytes() []byte
	Float32s() []float32
	Int32s() []int32
	Int64s() []int64
	// DeviceAddr is where kernels read mapped memory (0 when not mapped).
	DeviceAddr() DevPtr
	// Free releases the memory, after the device's queued work that
	// reads it has run.
	Free() error
}

// PinnedMemory is implemented by back ends that provide host memory for
// asynchronous copies and zero-copy reads. The CPU back end's is plain
// memory (its kernels are host code, so mapped memory is the host's).
type PinnedMemory interface {
	// AllocPinned allocates bytes (> 0) of pinned host memory; mapped
	// also maps it into the device's address space.
	AllocPinned(bytes uint64, mapped bool) (HostBuffer, error)
}

// SparseBuilder is implemented by back ends that can make a Sparse from
// CSR buffers built in their own memory (by a sampler's kernels), without
// a host round trip.
type SparseBuilder interface {
	// SparseFromBuffers wraps indptr (int64, rows+1) and indices (int32,
	// its whole length is the number of entries) as a rows x cols
	// Sparse, which takes ownership of both (FreeSparse frees them). The
	// lengths are checked; a back end may trust the contents. On error
	// the caller keeps the buffers.
	SparseFromBuffers(rows, cols int, indptr, indices Buffer) (Sparse, error)
}

// SparseAdopter is implemented by back ends whose Sparse can hold host
// CSR arrays as they are (the CPU back end's), so that code done with
// arrays it built (layer-wise inference's chunks, a block's self-loop
// variant) hands them over rather than have NewSparse copy them.
type SparseAdopter interface {
	// AdoptSparse is NewSparse without the copy: indptr and indices
	// are validated as NewSparse validates them, and on success belong
	// to the matrix (the caller may read them, never change them).
	AdoptSparse(rows, cols int, indptr []int64, indices []int32) (Sparse, error)
}

// CSRBuffers is implemented by the Sparse matrices of back ends that keep
// their structure in buffers (both back ends').
type CSRBuffers interface {
	// CSR returns the row pointers (int64, rows+1) and column indices
	// (int32, nnz). They belong to the matrix: do not change or free them.
	CSR() (indptr, indices Buffer)
}

// Memory is implemented by back ends with device memory and a caching
// allocator in front of it.
type Memory interface {
	// MemInfo returns the memory an allocation can still obtain (what
	// the device has free plus what the allocator caches, which it
	// releases when an allocation falls short) and the device's total.
	MemInfo() (free, total uint64, err error)
	// Stats returns the allocator's counters.
	Stats() AllocStats
	// ResetPeak restarts Stats().PeakBytes from the bytes in use and
	// cached now, so that one run among others can be measured.
	ResetPeak()
	// ReleaseCache returns the allocator's cached memory to the device.
	ReleaseCache() error
}

// AllocStats count a caching allocator's work. Mallocs and Frees count
// the device's own allocation calls; in a steady training loop they stay
// constant while Hits grows.
type AllocStats struct {
	Mallocs     int64 // device allocations that succeeded
	Frees       int64 // device frees
	Hits        int64 // allocations served from the cache
	Misses      int64 // allocations that needed a device allocation
	Retries     int64 // cache flushes after an out-of-memory error
	InUseBytes  int64 // bytes handed out and not yet freed (rounded sizes)
	CachedBytes int64 // bytes held in free lists
	PeakBytes   int64 // high-water mark of InUseBytes + CachedBytes
}

// Kernel is a back end's handle of a loaded kernel; only the back end
// (or a sibling handle of its device) that loaded it can launch it.
type Kernel uintptr

// Module is a set of kernels loaded by Kernels.LoadKernels.
type Module interface {
	// Kernel returns the kernel named name.
	Kernel(name string) (Kernel, error)
}

// Kernels is implemented by back ends that compile kernels at run time:
// the CUDA back end compiles CUDA C with NVRTC, through its on-disk
// kernel cache. The caller keeps its kernel source with its own code
// (embedded) and launches through Enqueuer.
type Kernels interface {
	// LoadKernels compiles src after the back end's common definitions
	// (for CUDA: integer types, GRID_STRIDE, the counter-based RNG of
	// internal/rng and index_error, from tensor/backend/cuda's
	// kernels/common.cuh) and loads it; the kernels are src's extern "C"
	// __global__ functions. Loading a name again returns the first module.
	LoadKernels(name, src string) (Module, error)
}

// Enqueuer is implemented by back ends with a queue of asynchronous work
// (a CUDA stream) that other packages may add kernels and copies to.
type Enqueuer interface {
	// Enqueue runs fn with the device locked and its queue at fn's
	// disposal: what fn queues runs in order, after everything queued
	// before and before everything queued after. fn must not call the
	// back end's own methods (the lock is not reentrant); the Queue
	// has what it needs.
	Enqueue(fn func(q Queue) error) error
}

// Queue is the device's queue inside Enqueue. Methods queue work and
// return; only Sync waits. Buffers are those of the device (of any of its
// handles, see Siblings).
type Queue interface {
	// AllocRaw returns a buffer of n elements whose contents are
	// undefined, from the handle's allocator (nothing is queued).
	AllocRaw(dt DType, n int) (Buffer, error)
	// Free returns a buffer to the allocator; later work may reuse its
	// memory, which is safe because the queue runs in order.
	Free(b Buffer)
	// Memset sets every byte of b to v.
	Memset(b Buffer, v byte) error
	// UploadFrom queues a copy of the host slice src ([]float32, []int32
	// or []int64 of dst's dtype, at most dst.Len() elements) into the
	// start of dst; src may be reused as soon as UploadFrom returns.
	UploadFrom(dst Buffer, src any) error
	// Copy queues a copy of src into dst (same dtype and length).
	Copy(dst, src Buffer) error
	// CopyToHost queues a copy of the first bytes of src into dst at
	// byte offset off; read dst after Sync or a Fence.
	CopyToHost(dst HostBuffer, off uint64, src Buffer, bytes uint64) error
	// ScanI64 writes the exclusive prefix sum of the int64 in[0:n] to
	// out[0:n] (out may be in).
	ScanI64(out, in Buffer, n int) error
	// IndexSlot reserves an index check for argument name of op: a
	// kernel given the slot (a scalar argument) reports the first
	// position of the int32 buffer idx outside [0, limit) with
	// index_error(slot, pos), and the back end's next Synchronize
	// returns it as an *IndexError.
	IndexSlot(op, name string, idx Buffer, limit int) (uint64, error)
	// Aligned reports whether b's first element sits at a multiple of
	// bytes (a power of two), for kernels with vector loads.
	Aligned(b Buffer, bytes int) bool
	// Launch runs kernel k over n items (n <= 0: nothing), one-
	// dimensionally: the kernel loops over its items with GRID_STRIDE, so
	// the back end picks the grid. args are in the kernel's parameter
	// order (at most 32).
	Launch(k Kernel, n int64, args ...Arg) error
	// Mark records f at the current end of the queue.
	Mark(f Fence) error
	// Sync waits until the queue has run everything queued so far.
	Sync() error
}

// Arg is one kernel argument: a buffer (passed as the address of its
// first element; a nil buffer as 0), a device address, or a fixed-width
// scalar. The zero Arg is the address 0.
type Arg struct {
	buf  Buffer
	bits uint64
}

// Buf passes buffer b (nil: address 0).
func Buf(b Buffer) Arg { return Arg{buf: b} }

// Addr passes a device address (mapped host memory).
func Addr(p DevPtr) Arg { return Arg{bits: uint64(p)} }

// I32 passes an int (C int32).
func I32(v int32) Arg { return Arg{bits: uint64(uint32(v))} }

// I64 passes a long long (C int64).
func I64(v int64) Arg { return Arg{bits: uint64(v)} }

// U64 passes an unsigned long long.
func U64(v uint64) Arg { return Arg{bits: v} }

// F32 passes a float.
func F32(v float32) Arg { return Arg{bits: uint64(math.Float32bits(v))} }

// Buffer returns the buffer a Buf argument passes (nil for other kinds).
func (a Arg) Buffer() Buffer { return a.buf }

// Bits returns the 8 bytes a non-buffer argument passes (4-byte C types
// in the low half).
func (a Arg) Bits() uint64 { return a.bits }

// Fused is implemented by back ends with fused kernels for the memory-
// bound chain of a training step (both back ends): each method computes
// what a sequence of Backend primitives computes, in one pass over
// memory, and writes no dropout mask. A mask is regenerated from
// Dropout's counter-based rule instead: element i (flat index of the
// output) is kept iff rng.DropUniform(seed, i) >= p, and a kept element is
// scaled by 1/(1-p) computed in float32. p must be in [0, 1); p == 0 is
// no dropout. On the CPU back end every result is bit for bit that of
// the unfused sequence (the conformance suite checks it on both).
type Fused interface {
	// GatherRowsDropout is GatherRows(dst, x, idx, xrows, cols) followed
	// by Dropout(dst, mask, dst, p, seed) without the mask: input
	// dropout applied while the features are gathered. dst and x are
	// float32 or BFloat16, as for GatherRows (a bfloat16 dst gets the
	// float32 result rounded).
	GatherRowsDropout(dst, x, idx Buffer, xrows, cols int, p float32, seed uint64) error
	// BiasActDropout computes dst = Dropout(act((a + b) + bias), p, seed)
	// for rows x cols matrices a and b (b may be nil) and a bias of
	// cols, where act is ReLU when relu is set and the identity
	// otherwise: Axpby, AddRowVector, Unary(ReLU) and Dropout in one
	// pass. dst may alias a or b. a and b are both Float32 or both
	// BFloat16, bias Float32, dst either (bfloat16: rounded on store).
	BiasActDropout(dst, a, b, bias Buffer, rows, cols int, relu bool, p float32, seed uint64) error
	// BiasActDropoutBackward takes y, BiasActDropout's output, and its
	// gradient dy, and writes dx, the gradient of the pre-activation
	// (a + b) + bias: with relu, dx = y > 0 ? dy/(1-p) : 0 (y is
	// positive exactly where the element was kept and the ReLU's input
	// was positive); without, dx = dy * mask (the regenerated mask, 1
	// when p == 0). When dbias is not nil it also writes the bias
	// gradient, dbias = SumRows(dx), or adds it to dbias when
	// accumulate is set (Axpby(dbias, 1, sums, 1, dbias)). dx may alias dy.
	// y and dy are both Float32 or both BFloat16; dx is either (a
	// bfloat16 dx is rounded, and dbias sums the rounded values:
	// SumRows(dx)); dbias is Float32.
	BiasActDropoutBackward(dx, dbias, y, dy Buffer, rows, cols int, relu bool, p float32, seed uint64, accumulate bool) error
}

// BF16Activations is implemented by back ends whose step primitives
// accept BFloat16 activations as the docs of Backend and Fused say (Gemm,
// Axpby, SumRows, GatherRows, SpMM with one head, the Fused chain). It
// is a method, not just the interface, so that a back end can turn its
// claim off (a kernel that fails its GPU check): trainers at BF16 store
// activations as bfloat16 (autograd's Tape.SetActivations) only when it
// reports true, and keep float32 activations otherwise.
type BF16Activations interface {
	BF16Activations() bool
}

// HasBF16Activations reports whether b accepts bfloat16 activations.
func HasBF16Activations(b Backend) bool {
	c, ok := b.(BF16Activations)
	return ok && c.BF16Activations()
}

// CheckDropoutRate returns a *ShapeError naming op when p is not in [0, 1).
func CheckDropoutRate(op string, p float32) error {
	if !(p >= 0 && p < 1) {
		return &ShapeError{Op: op, Msg: fmt.Sprintf("p = %v, want 0 <= p < 1", p)}
	}
	return nil
}

// OpTime is the device time spent in one kind of op while profiling.
type OpTime struct {
	Name  string  `json:"name"`  // kernel name, "sgemm", "memset", "memcpy HtoD", ...
	Calls int64   `json:"calls"` // ops queued
	Ms    float64 `json:"ms"`    // device milliseconds, summed
}

// Profiler is implemented by back ends that can time every op they
// queue (the CUDA back end). An op's time runs from just before it is
// queued to its end on the device, so it includes the time the queue
// sat idle waiting for the host when the host is the bottleneck.
type Profiler interface {
	// StartProfile clears earlier totals and starts timing.
	StartProfile() error
	// StopProfile waits for the queued work, stops timing and returns
	// the device time per op name since StartProfile, largest first.
	StopProfile() ([]OpTime, error)
}

// ProductFamilies is implemented by back ends whose dense products run
// kernels chosen per shape family, each launched once when its family
// is first seen (the CUDA back end's pinned cuBLASLt algorithms). A
// kernel's first use can wait for the devices, so a caller that runs
// collectives next to products warms the families first and can check
// here that none appeared later.
type ProductFamilies interface {
	// ProductFamilies returns the families warmed so far and the
	// products that ran a kernel outside them (fallbacks); ok is false
	// when the products are not pinned (then first uses are cuBLAS's).
	ProductFamilies() (families, fallbacks int, ok bool)
	// WarmProducts turns warming on or off: while on, every product
	// warms the family around its own shape (any size stands for its
	// row count), so products that differ from it only in one
	// dimension's size (a batch's row count) meet no new kernel later.
	WarmProducts(on bool)
}

// AsyncDownload is implemented by back ends that can queue a copy of a
// buffer into pinned host memory without waiting for it (the CUDA back
// end), so the host works on while the device computes and copies: read
// dst after a Fence recorded after the copy is reached. The CPU back end
// copies at once.
type AsyncDownload interface {
	// DownloadAsync queues a copy of src's first bytes into dst at byte
	// offset off.
	DownloadAsync(dst HostBuffer, off uint64, src Buffer, bytes uint64) error
}
