package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
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

// New puts the standard front end on a host transport, whose buffers
// are the CPU back end's: the front end hands the transport byte views of
// them (no copies).
func New(t Transport, o Options) Comm {
	c := &front{host: t}
	c.gate.init(t, o)
	return c
}

// NewDevice puts the standard front end on a device transport, whose
// buffers are its compute back end's.
func NewDevice(t DeviceTransport, o Options) Comm {
	c := &front{dev: t}
	c.gate.init(t, o)
	return c
}

// front is the one front end: argument checks, then the gate. Exactly one
// of host and dev is set.
type front struct {
	gate
	host Transport
	dev  DeviceTransport
}

func (c *front) Caps() Caps {
	if c.host != nil {
		return c.host.Caps()
	}
	return c.dev.Caps()
}

func (c *front) checkBuf(op Op, name string, b backend.Buffer) error {
	if b == nil {
		return c.argErr(op, "%s is nil", name)
	}
	switch b.DType() {
	case backend.Float32, backend.Int32, backend.Int64:
	default:
		return c.argErr(op, "%s: unsupported dtype %v (float32, int32 or int64)", name, b.DType())
	}
	if c.host != nil {
		if _, ok := cpu.Bytes(b); !ok {
			return c.argErr(op, "%s: a %T, not a host buffer of the CPU back end (cpu.WrapF32 and friends wrap a slice)", name, b)
		}
		return nil
	}
	if err := c.dev.Check(b); err != nil {
		return c.argErr(op, "%s: %v", name, err)
	}
	return nil
}

func (c *front) overlap(a, b backend.Buffer) bool {
	if a.Len() == 0 || b.Len() == 0 {
		return false
	}
	if c.host != nil {
		return backend.Overlap(a, b)
	}
	return c.dev.Overlap(a, b)
}

func (c *front) pair(op Op, dst, src backend.Buffer) error {
	if err := c.checkBuf(op, "dst", dst); err != nil {
		return err
	}
	if err := c.checkBuf(op, "src", src); err != nil {
		return err
	}
	if dst.DType() != src.DType() {
		return c.argErr(op, "dst is %v but src is %v", dst.DType(), src.DType())
	}
	if c.overlap(dst, src) {
		return c.argErr(op, "dst and src overlap")
	}
	return nil
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

func (c *front) AllReduce(ctx context.Context, buf backend.Buffer, op ReduceOp) error {
	if err := c.checkBuf(OpAllReduce, "buf", buf); err != nil {
		return err
	}
	if !op.Valid() {
		return c.argErr(OpAllReduce, "invalid reduction %v", op)
	}
	return c.do(ctx, &DeviceCall{Op: OpAllReduce, DType: buf.DType(), Red: op, Send: buf, Recv: buf}, buf.Len())
}

func (c *front) Broadcast(ctx context.Context, buf backend.Buffer, root int) error {
	if err := c.checkBuf(OpBroadcast, "buf", buf); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return c.argErr(OpBroadcast, "root %d out of range [0, %d)", root, c.size)
	}
	return c.do(ctx, &DeviceCall{Op: OpBroadcast, DType: buf.DType(), Root: root, Send: buf, Recv: buf}, buf.Len())
}

func (c *front) AllGather(ctx context.Context, dst, src backend.Buffer) error {
	if err := c.pair(OpAllGather, dst, src); err != nil {
		return err
	}
	if dst.Len()%c.size != 0 || dst.Len()/c.size != src.Len() {
		return c.argErr(OpAllGather, "dst has %d elements, want %d (size %d x src %d)", dst.Len(), c.size*src.Len(), c.size, src.Len())
	}
	cs, ds := equalCounts(c.size, src.Len())
	return c.do(ctx, &DeviceCall{Op: OpAllGather, DType: src.DType(), Send: src, Recv: dst, RecvCounts: cs, RecvDispls: ds}, src.Len())
}

func (c *front) AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error {
	if err := c.pair(OpAllGatherV, dst, src); err != nil {
		return err
	}
	ds, total, err := c.counts(OpAllGatherV, "counts", counts)
	if err != nil {
		return err
	}
	if counts[c.rank] != src.Len() {
		return c.argErr(OpAllGatherV, "counts[%d] = %d but src has %d elements", c.rank, counts[c.rank], src.Len())
	}
	if total != dst.Len() {
		return c.argErr(OpAllGatherV, "counts sum to %d but dst has %d elements", total, dst.Len())
	}
	cs := append([]int(nil), counts...)
	return c.do(ctx, &DeviceCall{Op: OpAllGatherV, DType: src.DType(), Send: src, Recv: dst, RecvCounts: cs, RecvDispls: ds}, src.Len())
}

func (c *front) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
	if err := c.pair(OpAllToAll, dst, src); err != nil {
		return err
	}
	if src.Len()%c.size != 0 {
		return c.argErr(OpAllToAll, "src has %d elements, not a multiple of the size %d", src.Len(), c.size)
	}
	if dst.Len() != src.Len() {
		return c.argErr(OpAllToAll, "dst has %d elements but src has %d", dst.Len(), src.Len())
	}
	cs, ds := equalCounts(c.size, src.Len()/c.size)
	rc, rd := equalCounts(c.size, src.Len()/c.size)
	return c.do(ctx, &DeviceCall{Op: OpAllToAll, DType: src.DType(), Send: src, Recv: dst,
		SendCounts: cs, SendDispls: ds, RecvCounts: rc, RecvDispls: rd}, src.Len())
}

func (c *front) AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error {
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
	if stotal != src.Len() {
		return c.argErr(OpAllToAllV, "sendCounts sum to %d but src has %d elements", stotal, src.Len())
	}
	if rtotal != dst.Len() {
		return c.argErr(OpAllToAllV, "recvCounts sum to %d but dst has %d elements", rtotal, dst.Len())
	}
	if sendCounts[c.rank] != recvCounts[c.rank] {
		return c.argErr(OpAllToAllV, "sendCounts[%d] = %d but recvCounts[%d] = %d (the block to itself)", c.rank, sendCounts[c.rank], c.rank, recvCounts[c.rank])
	}
	return c.do(ctx, &DeviceCall{Op: OpAllToAllV, DType: src.DType(), Send: src, Recv: dst,
		SendCounts: append([]int(nil), sendCounts...), SendDispls: sd,
		RecvCounts: append([]int(nil), recvCounts...), RecvDispls: rd}, src.Len())
}

func (c *front) ReduceScatter(ctx context.Context, dst, src backend.Buffer, op ReduceOp) error {
	if err := c.pair(OpReduceScatter, dst, src); err != nil {
		return err
	}
	if !op.Valid() {
		return c.argErr(OpReduceScatter, "invalid reduction %v", op)
	}
	if src.Len()%c.size != 0 || src.Len()/c.size != dst.Len() {
		return c.argErr(OpReduceScatter, "src has %d elements, want %d (size %d x dst %d)", src.Len(), c.size*dst.Len(), c.size, dst.Len())
	}
	cs, ds := equalCounts(c.size, dst.Len())
	return c.do(ctx, &DeviceCall{Op: OpReduceScatter, DType: src.DType(), Red: op, Send: src, Recv: dst, SendCounts: cs, SendDispls: ds}, src.Len())
}

func (c *front) Barrier(ctx context.Context) error {
	return c.do(ctx, &DeviceCall{Op: OpBarrier}, 0)
}

// do runs one validated call through the gate. A host transport gets the
// call as byte views of the CPU buffers, and a group of one copies
// locally; a device transport gets the buffers (and handles a group of
// one itself). Debug mode checks the descriptors first.
func (c *front) do(ctx context.Context, call *DeviceCall, count int) error {
	g := gated{op: call.Op, dtype: call.DType, count: count,
		bind: func(seq uint64, dl time.Time) { call.Seq, call.Deadline = seq, dl },
		run:  func(ctx context.Context) error { return c.dev.Run(ctx, call) }}
	if c.host != nil {
		hc := hostCall(call)
		g.bind = func(seq uint64, dl time.Time) {
			call.Seq, call.Deadline = seq, dl
			hc.Seq, hc.Deadline = seq, dl
		}
		g.run = func(ctx context.Context) error { return c.host.Run(ctx, hc) }
		if c.size == 1 {
			g.run = func(context.Context) error { return local(hc) }
		}
	}
	if c.o.Debug && c.size > 1 {
		g.check = func(ctx context.Context) error { return c.debugCheck(ctx, call) }
	}
	return c.gate.do(ctx, g)
}

// hostCall is c as a host transport sees it: the CPU buffers' bytes
// (validated by checkBuf, so the views cannot fail).
func hostCall(c *DeviceCall) *Call {
	hc := &Call{Op: c.Op, DType: c.DType, Red: c.Red, Root: c.Root,
		SendCounts: c.SendCounts, SendDispls: c.SendDispls, RecvCounts: c.RecvCounts, RecvDispls: c.RecvDispls}
	if c.Send != nil {
		hc.Send, _ = cpu.Bytes(c.Send)
	}
	if c.Recv != nil {
		hc.Recv, _ = cpu.Bytes(c.Recv)
	}
	return hc
}

// Sync waits for the operations run so far (within ctx's deadline, else
// Options.Timeout). It does not consume a sequence number.
func (c *front) Sync(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout())
	defer cancel()
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return wrapCtx(ctx.Err(), "waiting for this rank's previous operation to finish")
	}
	defer func() { <-c.sem }()
	if c.isClosed() {
		return ErrClosed
	}
	if c.broken != nil {
		return fmt.Errorf("%w: %v", ErrBroken, c.broken)
	}
	if c.host != nil {
		return nil // host operations are complete when they return
	}
	if err := c.dev.Sync(ctx); err != nil {
		if isTimeout(err) {
			err = fmt.Errorf("%w: waiting for the device: %w", ErrTimeout, err)
		}
		return fmt.Errorf("comm %s rank %d: sync: %w", c.dev.Kind(), c.rank, err)
	}
	return nil
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

func (c *front) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	if dt != backend.Float32 && dt != backend.Int32 && dt != backend.Int64 {
		return nil, fmt.Errorf("comm: Alloc of unsupported dtype %v", dt)
	}
	if n < 0 || n > maxAlloc {
		return nil, fmt.Errorf("comm: Alloc of %d elements", n)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	if c.dev != nil {
		b, err := c.dev.Backend().Alloc(dt, n)
		if err != nil {
			return nil, fmt.Errorf("comm %s rank %d: Alloc of %d elements of %v: %w", c.dev.Kind(), c.rank, n, dt, err)
		}
		return b, nil
	}
	if a, ok := c.host.(Allocator); ok && n > 0 {
		if p, err := a.Alloc(n * dt.Size()); err == nil {
			if b, err := cpu.WrapBytes(dt, p[:n*dt.Size()]); err == nil {
				return b, nil
			}
			a.Free(p)
		}
	}
	switch dt {
	case backend.Float32:
		return cpu.WrapF32(make([]float32, n)), nil
	case backend.Int32:
		return cpu.WrapI32(make([]int32, n)), nil
	}
	return cpu.WrapI64(make([]int64, n)), nil
}

func (c *front) Free(b backend.Buffer) error {
	if b == nil {
		return nil
	}
	if c.dev != nil {
		if err := c.dev.Check(b); err != nil {
			return fmt.Errorf("comm %s rank %d: Free: %w", c.dev.Kind(), c.rank, err)
		}
		c.dev.Backend().Free(b)
		return nil
	}
	p, ok := cpu.Bytes(b)
	if !ok {
		return fmt.Errorf("comm %s rank %d: Free of a %T, not a host buffer", c.host.Kind(), c.rank, b)
	}
	if a, ok := c.host.(Allocator); ok && len(p) > 0 {
		if c.isClosed() {
			return nil // the memory went with the transport
		}
		err := a.Free(p)
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
