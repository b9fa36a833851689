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

// devOp is one all-reduce on the device path, cut into chunks, chunk c
// through input slot slot (use u). For each chunk, the copy side waits
// until every peer's done flag for the slot reaches u (the slot's last
// use is over everywhere), copies the chunk of buf into this rank's input
// slot and raises this rank's in flag to u+1; the reduce side (the
// device's stream) waits until every rank's in flag reaches u+1, reduces
// every rank's input in rank order into the chunk of buf, and raises
// this rank's done flag to u+1. The copy side starts after the work
// queued on the device's stream before the op; the device's later work
// follows the last reduction.
type devOp struct {
	ticket  uint64
	buf     backend.Buffer
	dt      backend.DType
	red     comm.ReduceOp
	rank, n int
	chunks  []devChunk
	trace   bool
}

type devChunk struct {
	off, bytes int       // within buf
	slot       int       // input slot
	u          uint32    // use of the slot
	inputs     [][]byte  // every rank's input slot (host views)
	waitDone   []*uint32 // peers' done flags, wait for >= u (empty when u == 0)
	waitIn     []*uint32 // every rank's in flag (this rank's too), wait for >= u+1
	myIn       *uint32
	myDone     *uint32
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

// emuStream stands for a device's streams on the CPU back end (tests):
// a copier goroutine does the copy side of the queued ops and a reducer
// goroutine the reduce side, each in order and spinning on the flags the
// way cuStreamWaitValue32 does, and an op's copies start only after the
// previous op's reductions (as the device's stream orders them). So the
// device path's protocol (flags, slot reuse with the host pipeline,
// releasing a stuck stream) runs without a GPU.
type emuStream struct {
	copies, reduces chan *devOp
	completed       atomic.Uint64 // highest ticket completed
	// copied counts the chunks copied. The reducer waits for it as well
	// as for the flags: the race detector sees no ordering through
	// atomics on the (mmap'd) segment.
	copied atomic.Uint64
	failed atomic.Pointer[error]
	quit   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

func newEmuStream() *emuStream {
	e := &emuStream{copies: make(chan *devOp, 1024), reduces: make(chan *devOp, 1024), quit: make(chan struct{})}
	e.wg.Add(2)
	go e.copier()
	go e.reducer()
	return e
}

func (e *emuStream) queue(op *devOp) error {
	b, err := hostBytes(op.buf)
	for _, c := range op.chunks {
		if err == nil && len(b) < c.off+c.bytes {
			err = fmt.Errorf("gpushm: emulated stream: a %d-byte buffer for %d bytes at %d", len(b), c.bytes, c.off)
		}
	}
	if err != nil {
		return err
	}
	select {
	case e.copies <- op:
	default:
		return fmt.Errorf("gpushm: emulated stream is full")
	}
	e.reduces <- op // room: it holds no more than copies
	return nil
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

// spin waits until ok (false: stopped).
func (e *emuStream) spin(ok func() bool) bool {
	for i := 0; !ok(); i++ {
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

func (e *emuStream) wait(f *uint32, want uint32) bool {
	return e.spin(func() bool { return sg.Reached(atomic.LoadUint32(f), want) })
}

func (e *emuStream) copier() {
	defer e.wg.Done()
	for {
		var op *devOp
		select {
		case op = <-e.copies:
		case <-e.quit:
			return
		}
		// After the work queued before the op: the last op's reductions.
		if !e.spin(func() bool { return e.completed.Load() >= op.ticket-1 }) {
			return
		}
		b, _ := hostBytes(op.buf)
		for _, c := range op.chunks {
			for _, f := range c.waitDone {
				if !e.wait(f, c.u) {
					return
				}
			}
			copy(c.inputs[op.rank][:c.bytes], b[c.off:c.off+c.bytes])
			sg.Set(c.myIn, c.u+1)
			e.copied.Add(1)
		}
	}
}

func (e *emuStream) reducer() {
	defer e.wg.Done()
	var reduced uint64 // chunks
	for {
		var op *devOp
		select {
		case op = <-e.reduces:
		case <-e.quit:
			return
		}
		for _, c := range op.chunks {
			reduced++
			if !e.spin(func() bool { return e.copied.Load() >= reduced }) {
				return
			}
			for _, f := range c.waitIn {
				if !e.wait(f, c.u+1) {
					return
				}
			}
			b, _ := hostBytes(op.buf)
			// As the kernel does: this rank's input from the buffer (its
			// slot may already hold a later chunk), the peers' from
			// their slots, in rank order.
			out := b[c.off : c.off+c.bytes]
			own := append([]byte(nil), out...)
			x := func(r int) []byte {
				if r == op.rank {
					return own
				}
				return c.inputs[r][:c.bytes]
			}
			reduce.Into3(op.dt, op.red, out, x(0), x(1))
			for r := 2; r < op.n; r++ {
				reduce.Into(op.dt, op.red, out, x(r))
			}
			reduce.Finish(op.dt, op.red, out, op.n)
			sg.Set(c.myDone, c.u+1)
		}
		e.completed.Store(op.ticket)
	}
}
