package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
)

// DefaultTimeout bounds an operation whose context has no deadline.
const DefaultTimeout = 5 * time.Minute

// missingBudget bounds the extra time spent asking peers who is missing
// after a timeout.
const missingBudget = 250 * time.Millisecond

// Options configure the front end that New puts on a Transport.
type Options struct {
	// Timeout bounds each operation whose context has no deadline
	// (DefaultTimeout if zero).
	Timeout time.Duration
	// Debug: before each operation the ranks exchange what they are about
	// to do (operation, dtype, sizes, root, reduction) and fail with an
	// ErrMismatch *OpError on every rank if they disagree. Costs one small
	// all-gather per operation.
	Debug bool
	// HistorySize is how many Records History keeps (64 if zero).
	HistorySize int
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// New wraps a transport in the standard front end.
func New(t Transport, o Options) Comm {
	c := &front{t: t}
	c.gate.init(t, o)
	return c
}

type front struct {
	gate
	t Transport
}

func (c *front) Caps() Caps { return c.t.Caps() }

func checkDType(b Buf) bool {
	switch b.dt {
	case backend.Float32, backend.Int32, backend.Int64:
		return true
	}
	return false
}

func (c *front) checkBuf(op Op, name string, b Buf) error {
	if !checkDType(b) {
		return c.argErr(op, "%s: unsupported or missing dtype %v (use comm.F32, comm.I32 or comm.I64)", name, b.dt)
	}
	return nil
}

func overlap(a, b Buf) bool {
	if a.n == 0 || b.n == 0 {
		return false
	}
	pa, pb := uintptr(a.ptr), uintptr(b.ptr)
	ea, eb := pa+uintptr(a.n*a.dt.Size()), pb+uintptr(b.n*b.dt.Size())
	return pa < eb && pb < ea
}

// counts validates a per-rank count vector and returns its prefix sums.
func (g *gate) counts(op Op, name string, cs []int) ([]int, int, error) {
	if len(cs) != g.size {
		return nil, 0, g.argErr(op, "%s has %d entries, want one per rank (%d)", name, len(cs), g.size)
	}
	displs := make([]int, g.size)
	total := 0
	for r, n := range cs {
		if n < 0 {
			return nil, 0, g.argErr(op, "%s[%d] = %d is negative", name, r, n)
		}
		if total > int(^uint(0)>>2)-n {
			return nil, 0, g.argErr(op, "%s overflows", name)
		}
		displs[r] = total
		total += n
	}
	return displs, total, nil
}

func equalCounts(n, each int) ([]int, []int) {
	cs, ds := make([]int, n), make([]int, n)
	for r := range cs {
		cs[r], ds[r] = each, r*each
	}
	return cs, ds
}

func (c *front) AllReduce(ctx context.Context, buf Buf, op ReduceOp) error {
	if err := c.checkBuf(OpAllReduce, "buf", buf); err != nil {
		return err
	}
	if !op.Valid() {
		return c.argErr(OpAllReduce, "invalid reduction %v", op)
	}
	b := buf.Bytes()
	return c.do(ctx, &Call{Op: OpAllReduce, DType: buf.dt, Red: op, Send: b, Recv: b}, buf.n)
}

func (c *front) Broadcast(ctx context.Context, buf Buf, root int) error {
	if err := c.checkBuf(OpBroadcast, "buf", buf); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return c.argErr(OpBroadcast, "root %d out of range [0, %d)", root, c.size)
	}
	b := buf.Bytes()
	return c.do(ctx, &Call{Op: OpBroadcast, DType: buf.dt, Root: root, Send: b, Recv: b}, buf.n)
}

func (c *front) pair(op Op, dst, src Buf) error {
	if err := c.checkBuf(op, "dst", dst); err != nil {
		return err
	}
	if err := c.checkBuf(op, "src", src); err != nil {
		return err
	}
	if dst.dt != src.dt {
		return c.argErr(op, "dst is %v but src is %v", dst.dt, src.dt)
	}
	if overlap(dst, src) {
		return c.argErr(op, "dst and src overlap")
	}
	return nil
}

func (c *front) AllGather(ctx context.Context, dst, src Buf) error {
	if err := c.pair(OpAllGather, dst, src); err != nil {
		return err
	}
	if dst.n/c.size != src.n || dst.n%c.size != 0 {
		return c.argErr(OpAllGather, "dst has %d elements, want %d (size %d x src %d)", dst.n, c.size*src.n, c.size, src.n)
	}
	cs, ds := equalCounts(c.size, src.n)
	return c.do(ctx, &Call{Op: OpAllGather, DType: src.dt, Send: src.Bytes(), Recv: dst.Bytes(), RecvCounts: cs, RecvDispls: ds}, src.n)
}

func (c *front) AllGatherV(ctx context.Context, dst, src Buf, counts []int) error {
	if err := c.pair(OpAllGatherV, dst, src); err != nil {
		return err
	}
	ds, total, err := c.counts(OpAllGatherV, "counts", counts)
	if err != nil {
		return err
	}
	if counts[c.rank] != src.n {
		return c.argErr(OpAllGatherV, "counts[%d] = %d but src has %d elements", c.rank, counts[c.rank], src.n)
	}
	if total != dst.n {
		return c.argErr(OpAllGatherV, "counts sum to %d but dst has %d elements", total, dst.n)
	}
	cs := append([]int(nil), counts...)
	return c.do(ctx, &Call{Op: OpAllGatherV, DType: src.dt, Send: src.Bytes(), Recv: dst.Bytes(), RecvCounts: cs, RecvDispls: ds}, src.n)
}

func (c *front) AllToAll(ctx context.Context, dst, src Buf) error {
	if err := c.pair(OpAllToAll, dst, src); err != nil {
		return err
	}
	if src.n%c.size != 0 {
		return c.argErr(OpAllToAll, "src has %d elements, not a multiple of the size %d", src.n, c.size)
	}
	if dst.n != src.n {
		return c.argErr(OpAllToAll, "dst has %d elements but src has %d", dst.n, src.n)
	}
	cs, ds := equalCounts(c.size, src.n/c.size)
	rc, rd := equalCounts(c.size, src.n/c.size)
	return c.do(ctx, &Call{Op: OpAllToAll, DType: src.dt, Send: src.Bytes(), Recv: dst.Bytes(),
		SendCounts: cs, SendDispls: ds, RecvCounts: rc, RecvDispls: rd}, src.n)
}

func (c *front) AllToAllV(ctx context.Context, dst Buf, recvCounts []int, src Buf, sendCounts []int) error {
	if err := c.pair(OpAllToAllV, dst, src); err != nil {
		return err
	}
	sd, stotal, err := c.counts(OpAllToAllV, "sendCounts", sendCounts)
	if err != nil {
		return err
	}
	rd, rtotal, err := c.counts(OpAllToAllV, "recvCounts", recvCounts)
	if err != nil {
		return err
	}
	if stotal != src.n {
		return c.argErr(OpAllToAllV, "sendCounts sum to %d but src has %d elements", stotal, src.n)
	}
	if rtotal != dst.n {
		return c.argErr(OpAllToAllV, "recvCounts sum to %d but dst has %d elements", rtotal, dst.n)
	}
	if sendCounts[c.rank] != recvCounts[c.rank] {
		return c.argErr(OpAllToAllV, "sendCounts[%d] = %d but recvCounts[%d] = %d (the block to itself)", c.rank, sendCounts[c.rank], c.rank, recvCounts[c.rank])
	}
	return c.do(ctx, &Call{Op: OpAllToAllV, DType: src.dt, Send: src.Bytes(), Recv: dst.Bytes(),
		SendCounts: append([]int(nil), sendCounts...), SendDispls: sd,
		RecvCounts: append([]int(nil), recvCounts...), RecvDispls: rd}, src.n)
}

func (c *front) ReduceScatter(ctx context.Context, dst, src Buf, op ReduceOp) error {
	if err := c.pair(OpReduceScatter, dst, src); err != nil {
		return err
	}
	if !op.Valid() {
		return c.argErr(OpReduceScatter, "invalid reduction %v", op)
	}
	if src.n/c.size != dst.n || src.n%c.size != 0 {
		return c.argErr(OpReduceScatter, "src has %d elements, want %d (size %d x dst %d)", src.n, c.size*dst.n, c.size, dst.n)
	}
	cs, ds := equalCounts(c.size, dst.n)
	return c.do(ctx, &Call{Op: OpReduceScatter, DType: src.dt, Red: op, Send: src.Bytes(), Recv: dst.Bytes(), SendCounts: cs, SendDispls: ds}, src.n)
}

func (c *front) Barrier(ctx context.Context) error {
	return c.do(ctx, &Call{Op: OpBarrier}, 0)
}

// do runs one validated call through the gate: a group of one copies
// locally; debug mode checks the descriptors first.
func (c *front) do(ctx context.Context, call *Call, count int) error {
	g := gated{op: call.Op, dtype: call.DType, count: count,
		bind: func(seq uint64, dl time.Time) { call.Seq, call.Deadline = seq, dl },
		run:  func(ctx context.Context) error { return c.t.Run(ctx, call) }}
	switch {
	case c.size == 1:
		g.run = func(context.Context) error { return local(call) }
	case c.o.Debug:
		g.check = func(ctx context.Context) error { return c.debugCheck(ctx, call) }
	}
	return c.gate.do(ctx, g)
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

func dur(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d.Round(time.Millisecond)
}

func wrapCtx(err error, what string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s", ErrTimeout, what)
	}
	return fmt.Errorf("%w: %s", err, what)
}

// maxAlloc bounds Alloc (elements).
const maxAlloc = 1 << 40

func (c *front) Alloc(dt backend.DType, n int) (Buf, error) {
	if dt != backend.Float32 && dt != backend.Int32 && dt != backend.Int64 {
		return Buf{}, fmt.Errorf("comm: Alloc of unsupported dtype %v", dt)
	}
	if n < 0 || n > maxAlloc {
		return Buf{}, fmt.Errorf("comm: Alloc of %d elements", n)
	}
	if c.isClosed() {
		return Buf{}, ErrClosed
	}
	if a, ok := c.t.(Allocator); ok && n > 0 {
		if b, err := a.Alloc(n * dt.Size()); err == nil {
			return BufOf(dt, b[:n*dt.Size()]), nil
		}
	}
	switch dt {
	case backend.Float32:
		return F32(make([]float32, n)), nil
	case backend.Int32:
		return I32(make([]int32, n)), nil
	}
	return I64(make([]int64, n)), nil
}

func (c *front) Free(b Buf) error {
	if a, ok := c.t.(Allocator); ok && b.n > 0 {
		if c.isClosed() {
			return nil // the memory went with the transport
		}
		err := a.Free(b.Bytes())
		if errors.Is(err, ErrNotAllocated) {
			return nil // a heap fallback buffer
		}
		return err
	}
	return nil
}

// ErrNotAllocated is returned by Allocator.Free for memory it did not
// hand out.
var ErrNotAllocated = errors.New("comm: buffer was not allocated by this communicator")

// local performs a collective for a group of one.
func local(c *Call) error {
	switch c.Op {
	case OpAllGather, OpAllGatherV, OpAllToAll, OpAllToAllV, OpReduceScatter:
		copy(c.Recv, c.Send)
	}
	// AllReduce: sum, mean (divide by 1) and max of one rank are the
	// identity; Broadcast and Barrier have nothing to do.
	return nil
}

// bytesOf views a typed slice as bytes.
func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}
