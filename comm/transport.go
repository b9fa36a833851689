package comm

import (
	"context"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Transport is what a back end implements; New adds validation, numbering,
// deadlines, debug checks and error reporting on top. The front end calls
// Run for one collective at a time, with Size() >= 2 (a group of one is
// handled without the transport) and arguments already validated.
type Transport interface {
	// Kind names the back end ("inproc", "shm", "tcp").
	Kind() string
	Rank() int
	Size() int
	Caps() Caps
	// Run performs one collective. It must return by ctx's deadline (with
	// an error wrapping context.DeadlineExceeded or os.ErrDeadlineExceeded
	// when it ran out of time) or soon after ctx is cancelled. A failure
	// caused by identifiable peers should carry them (see PeerError).
	Run(ctx context.Context, c *Call) error
	// Missing returns, best effort within ctx, the ranks that have not
	// entered collective seq (or are known to be gone). Called after Run
	// timed out.
	Missing(ctx context.Context, seq uint64) []int
	// Abort breaks the transport after a failure: the in-flight Run (if
	// any) returns, peers are told (their pending Run fails with an
	// *AbortError carrying err's missing ranks), and later Runs fail.
	Abort(err *OpError)
	// Close releases the transport and tells peers this rank has left.
	Close() error
}

// Phase distinguishes the front end's internal debug exchange from the
// operation itself (both carry the same sequence number).
type Phase uint8

const (
	PhaseMain  Phase = 0
	PhaseDebug Phase = 1
)

// Call is one validated collective as the transport sees it. Data is given
// as byte views of the caller's buffers; counts and displacements are in
// elements and filled for every operation that has per-rank blocks, so a
// transport may implement AllGather as AllGatherV and AllToAll as
// AllToAllV.
type Call struct {
	Op       Op
	Phase    Phase
	Seq      uint64
	DType    backend.DType
	Red      ReduceOp // AllReduce, ReduceScatter
	Root     int      // Broadcast
	Deadline time.Time

	// Send and Recv: for AllReduce and Broadcast both are the one in-place
	// buffer. AllGather(V): Send is this rank's block, Recv the
	// concatenation. AllToAll(V): the packed blocks. ReduceScatter: Send
	// holds Size() blocks of len(Recv).
	Send, Recv []byte

	// Per-rank element counts and offsets. AllGather(V): RecvCounts[r] and
	// RecvDispls[r] locate rank r's block in Recv. AllToAll(V): SendCounts,
	// SendDispls locate the block for rank r in Send; RecvCounts,
	// RecvDispls the block from rank r in Recv. ReduceScatter: SendCounts
	// and SendDispls locate block r of Send. Nil for other operations.
	SendCounts, SendDispls []int
	RecvCounts, RecvDispls []int
}

// ElemSize is the element size in bytes.
func (c *Call) ElemSize() int { return c.DType.Size() }

// Allocator is implemented by transports that have memory of their own
// for collective buffers (the shm back end's shared segment). Alloc
// returns zeroed bytes aligned to 64, or an error when it has no room
// (Comm.Alloc then falls back to the Go heap); Free takes back exactly a
// slice Alloc returned.
type Allocator interface {
	Alloc(bytes int) ([]byte, error)
	Free(b []byte) error
}
