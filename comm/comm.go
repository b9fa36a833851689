package comm

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Op names a collective operation.
type Op uint8

const (
	OpAllReduce Op = iota + 1
	OpBroadcast
	OpAllGather
	OpAllGatherV
	OpAllToAll
	OpAllToAllV
	OpReduceScatter
	OpBarrier
)

func (o Op) String() string {
	switch o {
	case OpAllReduce:
		return "all_reduce"
	case OpBroadcast:
		return "broadcast"
	case OpAllGather:
		return "all_gather"
	case OpAllGatherV:
		return "all_gather_v"
	case OpAllToAll:
		return "all_to_all"
	case OpAllToAllV:
		return "all_to_all_v"
	case OpReduceScatter:
		return "reduce_scatter"
	case OpBarrier:
		return "barrier"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Valid reports whether o is one of the defined operations.
func (o Op) Valid() bool { return o >= OpAllReduce && o <= OpBarrier }

// ReduceOp combines the ranks' elements in AllReduce and ReduceScatter.
type ReduceOp uint8

const (
	// Sum adds. Floats are added in an order fixed by the back end and the
	// world size, so every rank gets bit-identical results and repeated runs
	// agree; inproc and shm add in rank order 0..n-1, tcp in ring order.
	// Integers wrap on overflow.
	Sum ReduceOp = iota + 1
	// Mean is Sum divided by the world size (integers truncate toward
	// zero).
	Mean
	// Max takes the largest element; a NaN on any rank gives NaN.
	Max
)

func (r ReduceOp) String() string {
	switch r {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	case Max:
		return "max"
	}
	return fmt.Sprintf("reduce(%d)", uint8(r))
}

// Valid reports whether r is one of the defined reductions.
func (r ReduceOp) Valid() bool { return r >= Sum && r <= Max }

// Buf is a host slice of float32, int32 or int64 elements handed to a
// collective. It refers to the caller's memory; the collective reads and
// writes it only until it returns. The zero Buf is invalid.
type Buf struct {
	dt  backend.DType
	n   int
	ptr unsafe.Pointer
}

// F32 wraps a float32 slice.
func F32(s []float32) Buf {
	return Buf{dt: backend.Float32, n: len(s), ptr: unsafe.Pointer(unsafe.SliceData(s))}
}

// I32 wraps an int32 slice.
func I32(s []int32) Buf {
	return Buf{dt: backend.Int32, n: len(s), ptr: unsafe.Pointer(unsafe.SliceData(s))}
}

// I64 wraps an int64 slice.
func I64(s []int64) Buf {
	return Buf{dt: backend.Int64, n: len(s), ptr: unsafe.Pointer(unsafe.SliceData(s))}
}

// DType is the element type (0 for the zero Buf).
func (b Buf) DType() backend.DType { return b.dt }

// Len is the number of elements.
func (b Buf) Len() int { return b.n }

// BufOf views b (whose length must be a multiple of dt's size and whose
// start must be aligned to it) as a Buf of dt.
func BufOf(dt backend.DType, b []byte) Buf {
	if len(b) == 0 {
		return Buf{dt: dt}
	}
	return Buf{dt: dt, n: len(b) / dt.Size(), ptr: unsafe.Pointer(unsafe.SliceData(b))}
}

// Bytes views the elements as bytes (no copy).
func (b Buf) Bytes() []byte {
	if b.n == 0 || b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.ptr), b.n*b.dt.Size())
}

// Float32s returns the float32 slice (nil unless DType is Float32).
func (b Buf) Float32s() []float32 {
	if b.dt != backend.Float32 || b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*float32)(b.ptr), b.n)
}

// Int32s returns the int32 slice (nil unless DType is Int32).
func (b Buf) Int32s() []int32 {
	if b.dt != backend.Int32 || b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*int32)(b.ptr), b.n)
}

// Int64s returns the int64 slice (nil unless DType is Int64).
func (b Buf) Int64s() []int64 {
	if b.dt != backend.Int64 || b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*int64)(b.ptr), b.n)
}

// Comm is one rank's handle on a communicator of Size() ranks, working on
// host memory. All ranks must issue the same collectives in the same order
// (use a Coordinator when several goroutines issue them); calls on one Comm
// are serialized. Every call has a deadline: the context's, or
// Options.Timeout from the call's start when the context has none.
//
// Buffers: for AllReduce and Broadcast buf is updated in place. Source and
// destination of the other operations must not overlap. Counts and
// displacements are in elements.
type Comm interface {
	// Rank is this rank's index in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Kind names the back end ("inproc", "shm", "tcp", ...).
	Kind() string
	// Caps describes what the back end allows.
	Caps() Caps

	// AllReduce combines buf across ranks with op; every rank gets the
	// result. Float32, int32 and int64.
	AllReduce(ctx context.Context, buf Buf, op ReduceOp) error
	// Broadcast copies root's buf into every other rank's buf (same length
	// everywhere).
	Broadcast(ctx context.Context, buf Buf, root int) error
	// AllGather concatenates every rank's src in rank order into dst, which
	// holds Size()*src.Len() elements.
	AllGather(ctx context.Context, dst, src Buf) error
	// AllGatherV is AllGather with counts[r] elements from rank r (the same
	// counts on every rank; counts[Rank()] == src.Len(), sum == dst.Len()).
	AllGatherV(ctx context.Context, dst, src Buf, counts []int) error
	// AllToAll sends block r of src (src.Len()/Size() elements) to rank r,
	// which stores it as block Rank() of its dst. dst.Len() == src.Len().
	AllToAll(ctx context.Context, dst, src Buf) error
	// AllToAllV sends sendCounts[r] elements to rank r (blocks packed in
	// rank order in src) and receives recvCounts[r] elements from rank r
	// (packed in rank order in dst). Rank a's sendCounts[b] must equal rank
	// b's recvCounts[a].
	AllToAllV(ctx context.Context, dst Buf, recvCounts []int, src Buf, sendCounts []int) error
	// ReduceScatter combines src (Size() blocks of dst.Len() elements)
	// across ranks with op; rank r receives block r of the result in dst.
	ReduceScatter(ctx context.Context, dst, src Buf, op ReduceOp) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error

	// Alloc returns a zeroed buffer of n elements in the memory the back
	// end handles best: on shm, this rank's part of the shared segment, so
	// collectives whose buffers all come from Alloc read and write the
	// peers' buffers directly instead of staging through shared slots;
	// elsewhere (or when that memory is used up) the Go heap. Release it
	// with Free; it must not be used after Free or Close.
	Alloc(dt backend.DType, n int) (Buf, error)
	// Free releases a buffer from Alloc (heap buffers are left to the GC).
	Free(b Buf) error

	// History returns the most recent operations, oldest first, for
	// diagnosing a failure.
	History() []Record
	// Close releases the communicator. Peers still waiting on this rank
	// fail promptly instead of waiting for their deadline. Close is
	// idempotent.
	Close() error
}

// Caps describes a back end's properties.
type Caps struct {
	// Overlap: a collective may run on another goroutine while the caller
	// computes (used by Bucketer to reduce buckets during backward).
	Overlap bool
	// RankOrderSum: float sums are computed in rank order 0..n-1 (so they
	// equal a sequential float32 sum bit for bit).
	RankOrderSum bool
}

// Record describes one finished (or failed) collective.
type Record struct {
	Seq     uint64
	Op      Op
	DType   backend.DType
	Count   int // elements this rank sent (AllReduce, Broadcast: buffer length)
	Start   time.Time
	Elapsed time.Duration
	Err     string // empty on success
}

// DeviceComm is the sibling of Comm for buffers that live in a compute
// back end's memory (backend.Buffer): NCCL on CUDA devices, or the GPU
// variant of the shared-memory all-reduce (device-to-host copies into the
// shared segment, host reduction, host-to-device copies). It has the same
// operations, argument rules, sequence numbering, deadlines and *OpError
// reporting as Comm. Operations are enqueued on the back end's stream in
// call order and may complete asynchronously; Sync waits (within the
// context's deadline) for every enqueued operation and reports the first
// failure. NewDevice puts this front end on a DeviceTransport; comm/nccl,
// comm/gpushm and comm/staged implement it (comm/devdist opens one from
// the environment).
type DeviceComm interface {
	Rank() int
	Size() int
	Kind() string
	AllReduce(ctx context.Context, buf backend.Buffer, op ReduceOp) error
	Broadcast(ctx context.Context, buf backend.Buffer, root int) error
	AllGather(ctx context.Context, dst, src backend.Buffer) error
	AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error
	AllToAll(ctx context.Context, dst, src backend.Buffer) error
	AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error
	ReduceScatter(ctx context.Context, dst, src backend.Buffer, op ReduceOp) error
	Barrier(ctx context.Context) error
	Sync(ctx context.Context) error
	Close() error
}
