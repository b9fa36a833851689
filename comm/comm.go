package comm

import (
	"context"
	"fmt"
	"time"

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

// Comm is one rank's handle on a communicator of Size() ranks. Buffers
// are compute back-end buffers (backend.Buffer): the host back ends
// (inproc, shm, tcp) take the CPU back end's, whose memory they read and
// write in place (cpu.WrapF32, WrapI32 and WrapI64 wrap a Go slice
// without copying); the device back ends (nccl, gpushm, staged) take
// buffers of their compute back end. All ranks must issue the same
// collectives in the same order (use a Coordinator when several
// goroutines issue them); calls on one Comm are serialized. Every call
// has a deadline: the context's, or Options.Timeout from the call's start
// when the context has none.
//
// Buffers: for AllReduce and Broadcast buf is updated in place. Source
// and destination of the other operations must not overlap. Counts and
// displacements are in elements. Operations may complete asynchronously
// on a device back end (enqueued on the device's stream in call order,
// ordered before later work on it); Sync waits for them. On the host back
// ends an operation is complete when it returns.
type Comm interface {
	// Rank is this rank's index in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Kind names the back end ("inproc", "shm", "tcp", "nccl", ...).
	Kind() string
	// Caps describes what the back end allows.
	Caps() Caps

	// AllReduce combines buf across ranks with op; every rank gets the
	// result. Float32, int32 and int64.
	AllReduce(ctx context.Context, buf backend.Buffer, op ReduceOp) error
	// Broadcast copies root's buf into every other rank's buf (same length
	// everywhere).
	Broadcast(ctx context.Context, buf backend.Buffer, root int) error
	// AllGather concatenates every rank's src in rank order into dst, which
	// holds Size()*src.Len() elements.
	AllGather(ctx context.Context, dst, src backend.Buffer) error
	// AllGatherV is AllGather with counts[r] elements from rank r (the same
	// counts on every rank; counts[Rank()] == src.Len(), sum == dst.Len()).
	AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error
	// AllToAll sends block r of src (src.Len()/Size() elements) to rank r,
	// which stores it as block Rank() of its dst. dst.Len() == src.Len().
	AllToAll(ctx context.Context, dst, src backend.Buffer) error
	// AllToAllV sends sendCounts[r] elements to rank r (blocks packed in
	// rank order in src) and receives recvCounts[r] elements from rank r
	// (packed in rank order in dst). Rank a's sendCounts[b] must equal rank
	// b's recvCounts[a].
	AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error
	// ReduceScatter combines src (Size() blocks of dst.Len() elements)
	// across ranks with op; rank r receives block r of the result in dst.
	ReduceScatter(ctx context.Context, dst, src backend.Buffer, op ReduceOp) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Sync waits (within the context's deadline, else Options.Timeout)
	// for every operation issued so far to complete and reports the first
	// failure; it consumes no sequence number. On the host back ends
	// there is nothing to wait for.
	Sync(ctx context.Context) error

	// Alloc returns a zeroed buffer of n elements in the memory the back
	// end handles best: on shm, this rank's part of the shared segment,
	// so collectives whose buffers all come from Alloc read and write
	// the peers' buffers directly instead of staging through shared
	// slots; on the other host back ends (or when that memory is used up)
	// the Go heap, as a CPU buffer; on the device back ends, their
	// compute back end's memory. Release it with Free; it must not be
	// used after Free or Close.
	Alloc(dt backend.DType, n int) (backend.Buffer, error)
	// Free releases a buffer from Alloc (heap buffers are left to the GC;
	// a device buffer goes back to its compute back end).
	Free(b backend.Buffer) error

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
