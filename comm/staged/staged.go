package staged

import (
	"context"
	"fmt"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Transport implements comm.DeviceTransport over a host communicator.
type Transport struct {
	host comm.Comm
	be   backend.Backend
	kind string
}

// New returns a transport that stages be's buffers through host. kind
// names it in errors and Kind() ("" means "staged-" + host.Kind()). The
// transport owns host: Close and Abort close it.
func New(host comm.Comm, be backend.Backend, kind string) *Transport {
	if kind == "" {
		kind = "staged-" + host.Kind()
	}
	return &Transport{host: host, be: be, kind: kind}
}

// Open returns the communicator of be's buffers over host with front-end
// options o.
func Open(host comm.Comm, be backend.Backend, o comm.Options) comm.Comm {
	return comm.NewDevice(New(host, be, ""), o)
}

func (t *Transport) Kind() string { return t.kind }
func (t *Transport) Rank() int    { return t.host.Rank() }
func (t *Transport) Size() int    { return t.host.Size() }

// Caps are the host communicator's: it does the reductions.
func (t *Transport) Caps() comm.Caps { return t.host.Caps() }

// Backend is the back end whose buffers the transport stages.
func (t *Transport) Backend() backend.Backend { return t.be }

// Host returns the host communicator.
func (t *Transport) Host() comm.Comm { return t.host }

// Check accepts buffers of the transport's back end (see CheckBuffer).
func (t *Transport) Check(b backend.Buffer) error { return CheckBuffer(t.be, b) }

// Overlap reports whether a and b share memory (backend.Overlap).
func (t *Transport) Overlap(a, b backend.Buffer) bool { return backend.Overlap(a, b) }

// CheckBuffer returns an error when b is not a buffer of be: of this
// handle, where be has several (backend.Siblings: the CUDA and CPU back
// ends); other back ends accept any buffer.
func CheckBuffer(be backend.Backend, b backend.Buffer) error {
	if s, ok := be.(backend.Siblings); ok && !s.Owns(b) {
		return fmt.Errorf("a %T, not a buffer of %s", b, be.Name())
	}
	return nil
}

// hostSlice returns the typed slice behind a CPU buffer, for Download and
// Upload.
func hostSlice(b backend.Buffer) any {
	switch b.DType() {
	case backend.Float32:
		return cpu.F32(b)
	case backend.Int32:
		return cpu.I32(b)
	}
	return cpu.I64(b)
}

// inHost reports whether the host communicator takes b as it is (a CPU
// buffer, or none).
func inHost(b backend.Buffer) bool {
	if b == nil {
		return true
	}
	_, ok := cpu.Bytes(b)
	return ok
}

// stage holds the host buffers of one call.
type stage struct {
	t    *Transport
	bufs []backend.Buffer
}

func (s *stage) alloc(dt backend.DType, n int) (backend.Buffer, error) {
	b, err := s.t.host.Alloc(dt, n)
	if err != nil {
		return nil, fmt.Errorf("staging %d elements of %v in host memory: %w", n, dt, err)
	}
	s.bufs = append(s.bufs, b)
	return b, nil
}

// down allocates host memory for b and downloads b into it.
func (s *stage) down(b backend.Buffer) (backend.Buffer, error) {
	h, err := s.alloc(b.DType(), b.Len())
	if err != nil {
		return h, err
	}
	if b.Len() > 0 {
		if err := s.t.be.Download(hostSlice(h), b); err != nil {
			return h, fmt.Errorf("copying to the host: %w", err)
		}
	}
	return h, nil
}

func (s *stage) up(dst, h backend.Buffer) error {
	if dst.Len() == 0 {
		return nil
	}
	if err := s.t.be.Upload(dst, hostSlice(h)); err != nil {
		return fmt.Errorf("copying to the device: %w", err)
	}
	return nil
}

func (s *stage) free() {
	for _, b := range s.bufs {
		s.t.host.Free(b)
	}
}

// Run stages c through the host communicator (host buffers go as they
// are).
func (t *Transport) Run(ctx context.Context, c *comm.DeviceCall) error {
	if inHost(c.Send) && inHost(c.Recv) {
		return t.direct(ctx, c)
	}
	s := &stage{t: t}
	defer s.free()
	switch c.Op {
	case comm.OpBarrier:
		return t.host.Barrier(ctx)
	case comm.OpAllReduce, comm.OpBroadcast:
		var h backend.Buffer
		var err error
		if c.Op == comm.OpBroadcast && t.Rank() != c.Root {
			h, err = s.alloc(c.DType, c.Recv.Len())
		} else {
			h, err = s.down(c.Send)
		}
		if err != nil {
			return err
		}
		if c.Op == comm.OpAllReduce {
			err = t.host.AllReduce(ctx, h, c.Red)
		} else {
			err = t.host.Broadcast(ctx, h, c.Root)
		}
		if err != nil {
			return err
		}
		return s.up(c.Recv, h)
	}
	src, err := s.down(c.Send)
	if err != nil {
		return err
	}
	dst, err := s.alloc(c.DType, c.Recv.Len())
	if err != nil {
		return err
	}
	if err := t.direct(ctx, &comm.DeviceCall{Op: c.Op, DType: c.DType, Red: c.Red, Root: c.Root, Send: src, Recv: dst,
		SendCounts: c.SendCounts, RecvCounts: c.RecvCounts}); err != nil {
		return err
	}
	return s.up(c.Recv, dst)
}

// direct runs c on the host communicator with c's own buffers.
func (t *Transport) direct(ctx context.Context, c *comm.DeviceCall) error {
	switch c.Op {
	case comm.OpBarrier:
		return t.host.Barrier(ctx)
	case comm.OpAllReduce:
		return t.host.AllReduce(ctx, c.Send, c.Red)
	case comm.OpBroadcast:
		return t.host.Broadcast(ctx, c.Send, c.Root)
	case comm.OpAllGather:
		return t.host.AllGather(ctx, c.Recv, c.Send)
	case comm.OpAllGatherV:
		return t.host.AllGatherV(ctx, c.Recv, c.Send, c.RecvCounts)
	case comm.OpAllToAll:
		return t.host.AllToAll(ctx, c.Recv, c.Send)
	case comm.OpAllToAllV:
		return t.host.AllToAllV(ctx, c.Recv, c.RecvCounts, c.Send, c.SendCounts)
	case comm.OpReduceScatter:
		return t.host.ReduceScatter(ctx, c.Recv, c.Send, c.Red)
	}
	return fmt.Errorf("staged: unsupported op %v", c.Op)
}

// Gather all-gathers words through the host communicator.
func (t *Transport) Gather(ctx context.Context, seq uint64, words []int64) ([]int64, error) {
	all := make([]int64, len(words)*t.Size())
	if err := t.host.AllGather(ctx, cpu.WrapI64(all), cpu.WrapI64(words)); err != nil {
		return nil, err
	}
	return all, nil
}

// Sync waits for the device's queued work (uploads may still be in
// flight when an operation returns).
func (t *Transport) Sync(ctx context.Context) error {
	if s, ok := t.be.(interface{ Synchronize() error }); ok {
		return s.Synchronize()
	}
	return nil
}

// Missing is not known beyond what the host communicator's errors carry.
func (t *Transport) Missing(ctx context.Context, seq uint64) []int { return nil }

// Abort closes the host communicator, so peers waiting in it fail at once
// naming this rank (when the host collective itself failed, the host
// communicator has already told them).
func (t *Transport) Abort(err *comm.OpError) { t.host.Close() }

// Close closes the host communicator.
func (t *Transport) Close() error { return t.host.Close() }
