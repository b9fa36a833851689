//go:build linux

package gpushm

import (
	"time"

	"github.com/strata-gnn/strata/internal/cudacomm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// cudaMover is the mover (and device path) of a CUDA GPU: internal/
// cudacomm's Mover, which copies on streams of its own into and out of
// the page-locked, mapped segment, and queues the device path's flag
// waits, copies and reduction kernels on the device's stream.
type cudaMover struct{ m *cudacomm.Mover }

// newCudaMover page-locks region (the segment from the control blocks to
// the end of the data; data is the slots' part of it) for be's GPU;
// probe is a word in region this rank may scribble on, used to check
// that the device can wait on the mapped flags.
func newCudaMover(be backend.Backend, region, data []byte, probe *uint32, slots int, trace bool) (*cudaMover, error) {
	m, err := cudacomm.NewMover(be, region, data, probe, slots, trace)
	if err != nil {
		return nil, err
	}
	return &cudaMover{m: m}, nil
}

func (c *cudaMover) bind() (func(), error)       { return c.m.Bind() }
func (c *cudaMover) begin(backend.Buffer) error  { return c.m.Begin() }
func (c *cudaMover) inDone(s int) (bool, error)  { return c.m.InDone(s) }
func (c *cudaMover) outDone(s int) (bool, error) { return c.m.OutDone(s) }
func (c *cudaMover) close() error                { return c.m.Close() }

func (c *cudaMover) toHost(s int, dst []byte, buf backend.Buffer, off int) error {
	return c.m.ToHost(s, dst, buf, off)
}

func (c *cudaMover) toDevice(s int, buf backend.Buffer, off int, src []byte) error {
	return c.m.ToDevice(s, buf, off, src)
}

func (c *cudaMover) pipeTiming(sIn, sOut int) (begun, in, out time.Duration, ok bool) {
	return c.m.PipeTiming(sIn, sOut)
}

func (c *cudaMover) stream() (streamer, string) {
	if why := c.m.DevicePath(); why != "" {
		return nil, why
	}
	return c, ""
}

// queue hands op to the Mover, which queues it on the device's stream.
func (c *cudaMover) queue(op *devOp) error {
	q := cudacomm.Op{Ticket: op.ticket, Buf: op.buf, DType: op.dt, Red: op.red, Rank: op.rank, N: op.n,
		Chunks: make([]cudacomm.Chunk, len(op.chunks)), Trace: op.trace}
	for i, ch := range op.chunks {
		q.Chunks[i] = cudacomm.Chunk{Off: ch.off, Bytes: ch.bytes, U: ch.u, Inputs: ch.inputs,
			WaitDone: ch.waitDone, WaitIn: ch.waitIn, MyIn: ch.myIn, MyDone: ch.myDone}
	}
	return c.m.Queue(&q)
}

func (c *cudaMover) done(ticket uint64) (bool, error) { return c.m.Done(ticket) }

func (c *cudaMover) timing(ticket uint64) (start, end time.Duration, ok bool) {
	return c.m.Timing(ticket)
}
