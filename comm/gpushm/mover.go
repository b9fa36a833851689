package gpushm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// mover copies chunks between a device buffer and the shared segment.
// Copies into slot s of the input side (toHost) and out of slot s of the
// result side (toDevice) are tracked per slot: at most one of each is in
// flight per slot. Every method but close is called from the goroutine
// that called bind (with its returned function not yet called).
type mover interface {
	// bind prepares the calling goroutine (CUDA: locks it to its thread
	// with the device's context current) and returns the undo.
	bind() (func(), error)
	// begin orders the operation's copies of buf after the work already
	// queued on the device's stream.
	begin(buf backend.Buffer) error
	// toHost queues a copy of len(dst) bytes of buf from byte off into dst.
	toHost(slot int, dst []byte, buf backend.Buffer, off int) error
	inDone(slot int) (bool, error)
	// toDevice queues a copy of src into buf at byte off.
	toDevice(slot int, buf backend.Buffer, off int, src []byte) error
	outDone(slot int) (bool, error)
	close() error
}

// hostBytes views a CPU back-end buffer's elements as bytes.
func hostBytes(b backend.Buffer) ([]byte, error) {
	var p unsafe.Pointer
	switch b.DType() {
	case backend.Float32:
		p = unsafe.Pointer(unsafe.SliceData(cpu.F32(b)))
	case backend.Int32:
		p = unsafe.Pointer(unsafe.SliceData(cpu.I32(b)))
	case backend.Int64:
		p = unsafe.Pointer(unsafe.SliceData(cpu.I64(b)))
	}
	n := b.Len() * b.DType().Size()
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, fmt.Errorf("gpushm: %T is not a CPU back-end buffer", b)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// hostMover copies CPU back-end buffers with memmove. With async set,
// every copy runs on its own goroutine and completes later, which
// exercises the pipeline's waiting paths the way a GPU's copy engines do.
type hostMover struct {
	async   bool
	in, out []atomic.Bool // per slot: copy finished
}

func newHostMover(slots int, async bool) *hostMover {
	return &hostMover{async: async, in: make([]atomic.Bool, slots), out: make([]atomic.Bool, slots)}
}

func (m *hostMover) bind() (func(), error)       { return func() {}, nil }
func (m *hostMover) begin(backend.Buffer) error  { return nil }
func (m *hostMover) inDone(s int) (bool, error)  { return m.in[s].Load(), nil }
func (m *hostMover) outDone(s int) (bool, error) { return m.out[s].Load(), nil }
func (m *hostMover) close() error                { return nil }
func (m *hostMover) copy(done *atomic.Bool, dst, src []byte) {
	done.Store(false)
	if !m.async {
		copy(dst, src)
		done.Store(true)
		return
	}
	go func() {
		copy(dst, src)
		done.Store(true)
	}()
}

func (m *hostMover) toHost(s int, dst []byte, buf backend.Buffer, off int) error {
	b, err := hostBytes(buf)
	if err != nil {
		return err
	}
	if off < 0 || off+len(dst) > len(b) {
		return fmt.Errorf("gpushm: copy of %d bytes at %d from a %d-byte buffer", len(dst), off, len(b))
	}
	m.copy(&m.in[s], dst, b[off:off+len(dst)])
	return nil
}

func (m *hostMover) toDevice(s int, buf backend.Buffer, off int, src []byte) error {
	b, err := hostBytes(buf)
	if err != nil {
		return err
	}
	if off < 0 || off+len(src) > len(b) {
		return fmt.Errorf("gpushm: copy of %d bytes at %d into a %d-byte buffer", len(src), off, len(b))
	}
	m.copy(&m.out[s], b[off:off+len(src)], src)
	return nil
}
