//go:build linux

package gpushm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/reduce"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
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
	// stream returns the device path (nil, and why, when this mover has
	// none).
	stream() (streamer, string)
	close() error
}

// streamer runs all-reduces on the device's own stream (the device path):
// every step is queued there, so the host takes no part once queue
// returns.
type streamer interface {
	// queue queues op after the work already on the device's stream.
	queue(op *devOp) error
	// done reports whether op number ticket has completed (ops complete
	// in order; only the last Slots tickets may be asked about).
	done(ticket uint64) (bool, error)
	// timing returns, for a completed op queued with tracing, the device
	// time from the calibration mark to the start and the end of the op
	// (ok false when not measured).
	timing(ticket uint64) (start, end time.Duration, ok bool)
}

// devOp is one all-reduce on the device path, through input slot slot
// (use u): on the device's stream, wait until every peer's done flag
// for the slot reaches u (the slot's last use is over everywhere), copy
// buf into this rank's input slot, raise this rank's in flag to u+1,
// wait until every peer's in flag reaches u+1, reduce every rank's input
// in rank order into buf, and raise this rank's done flag to u+1.
type devOp struct {
	ticket   uint64
	buf      backend.Buffer
	bytes    int
	dt       backend.DType
	red      comm.ReduceOp
	rank, n  int
	inputs   [][]byte  // every rank's input slot (host views)
	waitDone []*uint32 // peers' done flags, wait for >= u (empty when u == 0)
	waitIn   []*uint32 // peers' in flags, wait for >= u+1
	myIn     *uint32
	myDone   *uint32
	u        uint32
	trace    bool
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
	emu     *emuStream    // device path stand-in (tests), or nil
}

func newHostMover(slots int, async, emulate bool) *hostMover {
	m := &hostMover{async: async, in: make([]atomic.Bool, slots), out: make([]atomic.Bool, slots)}
	if emulate {
		m.emu = newEmuStream()
	}
	return m
}

func (m *hostMover) stream() (streamer, string) {
	if m.emu == nil {
		return nil, "the CPU back end has no device stream"
	}
	return m.emu, ""
}

func (m *hostMover) bind() (func(), error)       { return func() {}, nil }
func (m *hostMover) begin(backend.Buffer) error  { return nil }
func (m *hostMover) inDone(s int) (bool, error)  { return m.in[s].Load(), nil }
func (m *hostMover) outDone(s int) (bool, error) { return m.out[s].Load(), nil }
func (m *hostMover) close() error {
	if m.emu != nil {
		m.emu.stop()
	}
	return nil
}
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

// emuStream stands for a device's stream on the CPU back end (tests): one
// goroutine runs the queued ops in order, spinning on the flags the way
// cuStreamWaitValue32 does, so the device path's protocol (flags, slot
// reuse with the host pipeline, releasing a stuck stream) runs without a
// GPU.
type emuStream struct {
	ops       chan *devOp
	completed atomic.Uint64 // highest ticket completed
	failed    atomic.Pointer[error]
	quit      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once
}

func newEmuStream() *emuStream {
	e := &emuStream{ops: make(chan *devOp, 1024), quit: make(chan struct{})}
	e.wg.Add(1)
	go e.run()
	return e
}

func (e *emuStream) queue(op *devOp) error {
	select {
	case e.ops <- op:
		return nil
	default:
		return fmt.Errorf("gpushm: emulated stream is full")
	}
}

func (e *emuStream) done(ticket uint64) (bool, error) {
	if p := e.failed.Load(); p != nil {
		return false, *p
	}
	return e.completed.Load() >= ticket, nil
}

func (e *emuStream) timing(uint64) (time.Duration, time.Duration, bool) { return 0, 0, false }

func (e *emuStream) stop() {
	e.once.Do(func() { close(e.quit) })
	e.wg.Wait()
}

// wait spins until *f reaches want (false: stopped).
func (e *emuStream) wait(f *uint32, want uint32) bool {
	for i := 0; !sg.Reached(atomic.LoadUint32(f), want); i++ {
		select {
		case <-e.quit:
			return false
		default:
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return true
}

func (e *emuStream) run() {
	defer e.wg.Done()
	for {
		var op *devOp
		select {
		case op = <-e.ops:
		case <-e.quit:
			return
		}
		for _, f := range op.waitDone {
			if !e.wait(f, op.u) {
				return
			}
		}
		b, err := hostBytes(op.buf)
		if err == nil && len(b) < op.bytes {
			err = fmt.Errorf("gpushm: emulated stream: a %d-byte buffer for %d bytes", len(b), op.bytes)
		}
		if err != nil {
			e.failed.Store(&err)
			return
		}
		copy(op.inputs[op.rank][:op.bytes], b[:op.bytes])
		sg.Set(op.myIn, op.u+1)
		for _, f := range op.waitIn {
			if !e.wait(f, op.u+1) {
				return
			}
		}
		out := b[:op.bytes]
		reduce.Into3(op.dt, op.red, out, op.inputs[0][:op.bytes], op.inputs[1][:op.bytes])
		for r := 2; r < op.n; r++ {
			reduce.Into(op.dt, op.red, out, op.inputs[r][:op.bytes])
		}
		reduce.Finish(op.dt, op.red, out, op.n)
		sg.Set(op.myDone, op.u+1)
		e.completed.Store(op.ticket)
	}
}
