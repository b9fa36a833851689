package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Transport is what a host back end implements (a device back end
// implements DeviceTransport); New adds validation, numbering, deadlines,
// debug checks and error reporting on top, and hands the transport byte
// views of the callers' CPU buffers. The front end calls Run for one
// collective at a time, with Size() >= 2 (a group of one is handled
// without the transport) and arguments already validated.
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

// Count is the element count every rank must pass alike to c: the buffer
// of AllReduce and Broadcast, the block each rank sends in AllGather and
// AllToAll (src), the whole result of AllGatherV, the source of
// ReduceScatter; 0 for Barrier and -1 for AllToAllV, whose ranks' counts
// differ by design. Transports carry it with their data, so that ranks
// passing different counts fail (PeerMismatch) instead of exchanging
// garbage.
func (c *Call) Count() int64 {
	es := c.ElemSize()
	if es == 0 {
		return 0
	}
	return agreedCount(c.Op, int64(len(c.Send)/es), int64(len(c.Recv)/es))
}

func agreedCount(op Op, send, recv int64) int64 {
	switch op {
	case OpAllReduce, OpBroadcast, OpAllGatherV:
		return recv
	case OpAllGather, OpAllToAll, OpReduceScatter:
		return send
	case OpAllToAllV:
		return -1
	}
	return 0
}

// Desc is what a transport tells its peers about the operation its data
// belongs to: number, kind, phase, dtype and the count every rank must
// agree on (Call.Count).
type Desc struct {
	Seq   uint64
	Op    Op
	Phase Phase
	DType backend.DType
	Count int64
}

// DescOf is c's Desc.
func DescOf(c *Call) Desc {
	return Desc{Seq: c.Seq, Op: c.Op, Phase: c.Phase, DType: c.DType, Count: c.Count()}
}

// DeviceDescOf is the Desc of a device call (counts as in Call.Count).
func DeviceDescOf(c *DeviceCall) Desc {
	var send, recv int64
	if c.Send != nil {
		send = int64(c.Send.Len())
	}
	if c.Recv != nil {
		recv = int64(c.Recv.Len())
	}
	return Desc{Seq: c.Seq, Op: c.Op, Phase: c.Phase, DType: c.DType, Count: agreedCount(c.Op, send, recv)}
}

func (d Desc) String() string {
	s := fmt.Sprintf("%v #%d", d.Op, d.Seq)
	if d.Phase == PhaseDebug {
		s += " (debug check)"
	}
	return s
}

func elements(n int64) string {
	if n == 1 {
		return "1 element"
	}
	return fmt.Sprintf("%d elements", n)
}

// PeerMismatch compares the Desc a peer sent with its data (theirs) with
// this rank's (mine) and returns a *MismatchError naming both (the
// operations and their numbers, or the dtypes, or the element counts), or
// nil if they agree.
func PeerMismatch(mine, theirs Desc, rank, peer int) error {
	var diff string
	switch {
	case theirs.Seq != mine.Seq || theirs.Op != mine.Op || theirs.Phase != mine.Phase:
		diff = fmt.Sprintf("rank %d is in %v while rank %d is in %v", peer, theirs, rank, mine)
	case theirs.DType != mine.DType:
		diff = fmt.Sprintf("rank %d passed %v to %v, rank %d passed %v", peer, theirs.DType, mine, rank, mine.DType)
	case theirs.Count != mine.Count:
		diff = fmt.Sprintf("rank %d passed %s to %v, rank %d passed %d (every rank must pass the same count)", peer, elements(theirs.Count), mine, rank, mine.Count)
	default:
		return nil
	}
	return &MismatchError{Seq: mine.Seq, Diff: diff}
}

// BlockMismatch reports that peer sends a block of got elements in the
// operation mine where this rank expects want (AllGatherV or AllToAllV
// counts that do not pair up).
func BlockMismatch(mine Desc, rank, peer int, got, want int64) error {
	return &MismatchError{Seq: mine.Seq, Diff: fmt.Sprintf("rank %d sends %s in %v, rank %d expects %d from it", peer, elements(got), mine, rank, want)}
}
