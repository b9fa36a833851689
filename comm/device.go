package comm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-gnn/strata/tensor/backend"
)

// KindGPUShm is the GPU variant of the shared-memory back end (device
// buffers copied through a pinned shared segment, reduced on the host).
const KindGPUShm = "gpushm"

// DeviceKinds lists the values --comm accepts for device communicators.
var DeviceKinds = []string{KindAuto, KindNCCL, KindGPUShm, KindShm, KindTCP}

// SelectDevice resolves --comm for a device communicator (DeviceComm):
// auto picks NCCL when every GPU pair has peer-to-peer access and NCCL
// loads, the GPU shared-memory back end for ranks on one host otherwise,
// and TCP (device buffers staged through host memory) across hosts. "shm"
// means gpushm here. The second result says why.
func SelectDevice(kind string, t Topology) (string, string, error) {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "", KindAuto:
		switch {
		case t.GPUs && t.PeerAccess && t.NCCL:
			return KindNCCL, "every GPU pair has peer-to-peer access", nil
		case t.SameHost:
			why := "all ranks are on one host"
			switch {
			case t.GPUs && !t.PeerAccess:
				why += " and not every GPU pair has peer-to-peer access"
			case t.GPUs:
				why += " and NCCL is not available"
			}
			return KindGPUShm, why, nil
		default:
			return KindTCP, "the ranks are on several hosts", nil
		}
	case KindNCCL:
		if !t.GPUs {
			return "", "", fmt.Errorf("comm: --comm nccl needs a GPU per rank")
		}
		if !t.NCCL {
			return "", "", fmt.Errorf("comm: --comm nccl: NCCL is not available in this build or on this host")
		}
		return KindNCCL, "requested", nil
	case KindGPUShm, KindShm:
		if !t.SameHost {
			return "", "", fmt.Errorf("comm: --comm %s needs every rank on one host", kind)
		}
		return KindGPUShm, "requested", nil
	case KindTCP:
		return KindTCP, "requested", nil
	}
	return "", "", fmt.Errorf("comm: unknown --comm %q for device buffers (want one of %s)", kind, strings.Join(DeviceKinds, ", "))
}

// DeviceCall is one validated device collective as a DeviceTransport
// sees it: the same fields as Call, with back-end buffers instead of byte
// views. AllReduce and Broadcast have Send == Recv (in place).
type DeviceCall struct {
	Op       Op
	Phase    Phase
	Seq      uint64
	DType    backend.DType
	Red      ReduceOp
	Root     int
	Deadline time.Time

	Send, Recv backend.Buffer

	// Per-rank element counts and offsets, as in Call.
	SendCounts, SendDispls []int
	RecvCounts, RecvDispls []int
}

// DeviceTransport is what a device back end implements; NewDevice puts the
// standard front end on it (validation, numbering, deadlines, debug
// checks, *OpError reporting, history). Run is called for one collective
// at a time, with arguments validated, for every group size (a back end
// handles a group of one itself).
type DeviceTransport interface {
	Kind() string
	Rank() int
	Size() int
	// Check returns an error saying why b (not nil, of a supported dtype)
	// cannot be used: another back end's or device's buffer, a freed one.
	Check(b backend.Buffer) error
	// Overlap reports whether two buffers share memory.
	Overlap(a, b backend.Buffer) bool
	// Run performs one collective; it must return by ctx's deadline (an
	// error wrapping context.DeadlineExceeded when it ran out of time).
	// When it returns nil the result may still be in flight on the back
	// end's stream, ordered before later work on it.
	Run(ctx context.Context, c *DeviceCall) error
	// Gather all-gathers len(words) int64 from every rank (rank order),
	// for the debug check of operation seq.
	Gather(ctx context.Context, seq uint64, words []int64) ([]int64, error)
	// Sync waits for every operation run so far to complete.
	Sync(ctx context.Context) error
	// Missing, Abort and Close are as in Transport.
	Missing(ctx context.Context, seq uint64) []int
	Abort(err *OpError)
	Close() error
}

// NewDevice wraps a device transport in the standard front end. The
// result also has History() []Record.
func NewDevice(t DeviceTransport, o Options) DeviceComm {
	c := &dfront{t: t}
	c.gate.init(t, o)
	return c
}

// HistoryOf returns a device communicator's recent operations (nil when
// it keeps none).
func HistoryOf(c DeviceComm) []Record {
	if h, ok := c.(interface{ History() []Record }); ok {
		return h.History()
	}
	return nil
}

type dfront struct {
	gate
	t DeviceTransport
}

func (c *dfront) checkBuf(op Op, name string, b backend.Buffer) error {
	if b == nil {
		return c.argErr(op, "%s is nil", name)
	}
	switch b.DType() {
	case backend.Float32, backend.Int32, backend.Int64:
	default:
		return c.argErr(op, "%s: unsupported dtype %v (float32, int32 or int64)", name, b.DType())
	}
	if err := c.t.Check(b); err != nil {
		return c.argErr(op, "%s: %v", name, err)
	}
	return nil
}

func (c *dfront) pair(op Op, dst, src backend.Buffer) error {
	if err := c.checkBuf(op, "dst", dst); err != nil {
		return err
	}
	if err := c.checkBuf(op, "src", src); err != nil {
		return err
	}
	if dst.DType() != src.DType() {
		return c.argErr(op, "dst is %v but src is %v", dst.DType(), src.DType())
	}
	if dst.Len() > 0 && src.Len() > 0 && c.t.Overlap(dst, src) {
		return c.argErr(op, "dst and src overlap")
	}
	return nil
}

func (c *dfront) AllReduce(ctx context.Context, buf backend.Buffer, op ReduceOp) error {
	if err := c.checkBuf(OpAllReduce, "buf", buf); err != nil {
		return err
	}
	if !op.Valid() {
		return c.argErr(OpAllReduce, "invalid reduction %v", op)
	}
	return c.do(ctx, &DeviceCall{Op: OpAllReduce, DType: buf.DType(), Red: op, Send: buf, Recv: buf}, buf.Len())
}

func (c *dfront) Broadcast(ctx context.Context, buf backend.Buffer, root int) error {
	if err := c.checkBuf(OpBroadcast, "buf", buf); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return c.argErr(OpBroadcast, "root %d out of range [0, %d)", root, c.size)
	}
	return c.do(ctx, &DeviceCall{Op: OpBroadcast, DType: buf.DType(), Root: root, Send: buf, Recv: buf}, buf.Len())
}

func (c *dfront) AllGather(ctx context.Context, dst, src backend.Buffer) error {
	if err := c.pair(OpAllGather, dst, src); err != nil {
		return err
	}
	if dst.Len()%c.size != 0 || dst.Len()/c.size != src.Len() {
		return c.argErr(OpAllGather, "dst has %d elements, want %d (size %d x src %d)", dst.Len(), c.size*src.Len(), c.size, src.Len())
	}
	cs, ds := equalCounts(c.size, src.Len())
	return c.do(ctx, &DeviceCall{Op: OpAllGather, DType: src.DType(), Send: src, Recv: dst, RecvCounts: cs, RecvDispls: ds}, src.Len())
}

func (c *dfront) AllGatherV(ctx context.Context, dst, src backend.Buffer, counts []int) error {
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

func (c *dfront) AllToAll(ctx context.Context, dst, src backend.Buffer) error {
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

func (c *dfront) AllToAllV(ctx context.Context, dst backend.Buffer, recvCounts []int, src backend.Buffer, sendCounts []int) error {
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

func (c *dfront) ReduceScatter(ctx context.Context, dst, src backend.Buffer, op ReduceOp) error {
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

func (c *dfront) Barrier(ctx context.Context) error {
	return c.do(ctx, &DeviceCall{Op: OpBarrier}, 0)
}

// Sync waits for the operations run so far (within ctx's deadline, else
// Options.Timeout). It does not consume a sequence number.
func (c *dfront) Sync(ctx context.Context) error {
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
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if c.broken != nil {
		return fmt.Errorf("%w: %v", ErrBroken, c.broken)
	}
	if err := c.t.Sync(ctx); err != nil {
		if isTimeout(err) {
			err = fmt.Errorf("%w: waiting for the device: %w", ErrTimeout, err)
		}
		return fmt.Errorf("comm %s rank %d: sync: %w", c.t.Kind(), c.rank, err)
	}
	return nil
}

func (c *dfront) do(ctx context.Context, call *DeviceCall, count int) error {
	g := gated{op: call.Op, dtype: call.DType, count: count,
		bind: func(seq uint64, dl time.Time) { call.Seq, call.Deadline = seq, dl },
		run:  func(ctx context.Context) error { return c.t.Run(ctx, call) }}
	if c.o.Debug && c.size > 1 {
		g.check = func(ctx context.Context) error { return c.debugCheck(ctx, call) }
	}
	return c.gate.do(ctx, g)
}

// deviceDescriptor has the layout of descriptor (debug.go).
func deviceDescriptor(c *DeviceCall, n int) []int64 {
	d := make([]int64, dFixed+2*n)
	d[dOp], d[dDType], d[dRed], d[dRoot] = int64(c.Op), int64(c.DType), int64(c.Red), int64(c.Root)
	if c.Send != nil {
		d[dSend] = int64(c.Send.Len())
	}
	if c.Recv != nil {
		d[dRecv] = int64(c.Recv.Len())
	}
	if c.Op == OpAllToAllV {
		for r := 0; r < n; r++ {
			d[dFixed+r] = int64(c.SendCounts[r])
		}
	}
	if c.Op == OpAllGatherV || c.Op == OpAllToAllV {
		for r := 0; r < n; r++ {
			d[dFixed+n+r] = int64(c.RecvCounts[r])
		}
	}
	return d
}

func (c *dfront) debugCheck(ctx context.Context, call *DeviceCall) error {
	mine := deviceDescriptor(call, c.size)
	return c.checkDescriptors(call.Seq, mine, func(all []int64) error {
		got, err := c.t.Gather(ctx, call.Seq, mine)
		if err != nil {
			return err
		}
		if len(got) != len(all) {
			return fmt.Errorf("%w: debug exchange returned %d words, want %d", ErrProtocol, len(got), len(all))
		}
		copy(all, got)
		return nil
	})
}
