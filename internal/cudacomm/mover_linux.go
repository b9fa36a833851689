//go:build linux

package cudacomm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/strata-gnn/strata/comm"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// Mover is comm/gpushm's mover on a CUDA GPU. It copies with the GPU's
// copy engines on two streams of its own (device-to-host and
// host-to-device run concurrently), into and out of the segment's data
// region, which it page-locks with cuMemHostRegister so the copies are
// asynchronous. The region registered also holds the flags and is mapped
// into the device's address space, so the device path can wait for and
// raise flags from the device's stream (Queue).
//
// Every method but Close is called from the goroutine that called Bind
// (with its returned function not yet called).
type Mover struct {
	dev       *cuda.Device
	cudev     cu.Device
	ctx       cu.Context
	sIn, sOut cu.Stream
	begun     cu.Event
	in, out   []cu.Event
	cal       cu.Event // trace: a mark on an idle stream at the start of an operation
	region    unsafe.Pointer

	// Device path (nil fns when unavailable; noDev says why).
	devBase   cu.DevPtr // device address of region
	fns       map[backend.DType]cu.Function
	noDev     string
	marks     []cu.Event // completion of device-path ops, by ticket mod len
	starts    []cu.Event // trace: op start on the device's stream
	cals      []cu.Event // trace: calibration mark of the op
	markTicks []uint64
	trace     bool
}

// gpushmKernels reduce, in rank order, every rank's input slot (read
// from mapped host memory with ld.global.cv: never from a stale cache
// line) into buf; the calling rank's own input is read from buf. Sum and
// Mean add, Mean then divides (float division; integers truncate), Max
// keeps the larger (NaN wins), exactly as comm/internal/reduce does on
// the host. Integer sums wrap.
const gpushmKernels = `
__device__ __forceinline__ float gpushm_ld(const float* p) { float v; asm volatile("ld.global.cv.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v; }
__device__ __forceinline__ int gpushm_ld(const int* p) { int v; asm volatile("ld.global.cv.s32 %0, [%1];" : "=r"(v) : "l"(p)); return v; }
__device__ __forceinline__ long long gpushm_ld(const long long* p) { long long v; asm volatile("ld.global.cv.s64 %0, [%1];" : "=l"(v) : "l"(p)); return v; }

__device__ __forceinline__ float gpushm_add(float a, float b) { return a + b; }
__device__ __forceinline__ int gpushm_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ long long gpushm_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
__device__ __forceinline__ float gpushm_max(float a, float b) { return (b > a || b != b) ? b : a; }
__device__ __forceinline__ int gpushm_max(int a, int b) { return b > a ? b : a; }
__device__ __forceinline__ long long gpushm_max(long long a, long long b) { return b > a ? b : a; }

template <typename T>
__device__ __forceinline__ void gpushm_allreduce(T* buf, const char* base, long long stride, int n, int me, long long count, int op) {
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
    T acc = me == 0 ? buf[i] : gpushm_ld((const T*)base + i);
    for (int r = 1; r < n; r++) {
      T v = r == me ? buf[i] : gpushm_ld((const T*)(base + r * stride) + i);
      acc = op == 3 ? gpushm_max(acc, v) : gpushm_add(acc, v);
    }
    if (op == 2 && n > 1) acc = acc / (T)n;
    buf[i] = acc;
  }
}

extern "C" __global__ void gpushm_allreduce_f32(float* buf, const char* base, long long stride, int n, int me, long long count, int op) { gpushm_allreduce<float>(buf, base, stride, n, me, count, op); }
extern "C" __global__ void gpushm_allreduce_i32(int* buf, const char* base, long long stride, int n, int me, long long count, int op) { gpushm_allreduce<int>(buf, base, stride, n, me, count, op); }
extern "C" __global__ void gpushm_allreduce_i64(long long* buf, const char* base, long long stride, int n, int me, long long count, int op) { gpushm_allreduce<long long>(buf, base, stride, n, me, count, op); }
`

// opCode is the kernels' code for a reduction.
func opCode(r comm.ReduceOp) int32 {
	switch r {
	case comm.Mean:
		return 2
	case comm.Max:
		return 3
	}
	return 1
}

// NewMover page-locks region (the segment from the control blocks to
// the end of the data; data is the slots' part of it) for be's GPU and
// prepares the streams and events, for slots slots; probe is a word in
// region this rank may scribble on, used to check that the device can
// wait on the mapped flags. trace times the operations (PipeTiming,
// Timing).
func NewMover(be backend.Backend, region, data []byte, probe *uint32, slots int, trace bool) (m *Mover, err error) {
	dev, ok := be.(*cuda.Device)
	if !ok || dev == nil {
		return nil, fmt.Errorf("gpushm: %s is not a CUDA device", name(be))
	}
	if len(region) == 0 || len(data) == 0 {
		return nil, errors.New("gpushm: empty segment")
	}
	if err := Load(); err != nil {
		return nil, err
	}
	m = &Mover{dev: dev, trace: trace}
	if m.cudev, err = cu.GetDevice(dev.Ordinal()); err != nil {
		return nil, err
	}
	if m.ctx, err = m.cudev.PrimaryCtxRetain(); err != nil {
		return nil, err
	}
	unbind, err := m.ctx.Bind()
	defer unbind()
	if err != nil {
		m.cudev.PrimaryCtxRelease()
		return nil, err
	}
	fail := func(e error) (*Mover, error) {
		m.release()
		return nil, e
	}
	evFlags := uint32(cu.EventDisableTiming)
	if trace {
		evFlags = cu.EventDefault
	}
	event := func() (cu.Event, error) { return cu.EventCreate(evFlags) }
	if m.sIn, err = cu.StreamCreate(cu.StreamNonBlocking); err != nil {
		return fail(err)
	}
	if m.sOut, err = cu.StreamCreate(cu.StreamNonBlocking); err != nil {
		return fail(err)
	}
	if m.begun, err = event(); err != nil {
		return fail(err)
	}
	if m.cal, err = event(); err != nil {
		return fail(err)
	}
	for i := 0; i < slots; i++ {
		for _, l := range []*[]cu.Event{&m.in, &m.out, &m.marks, &m.starts, &m.cals} {
			e, err := event()
			if err != nil {
				return fail(err)
			}
			*l = append(*l, e)
		}
	}
	m.markTicks = make([]uint64, slots)
	// Page-lock the whole region, mapped for the device path; if mapping
	// fails, only the data (host pipeline only).
	p := unsafe.Pointer(unsafe.SliceData(region))
	if err := cu.MemHostRegister(p, uint64(len(region)), cu.HostRegisterPortable|cu.HostRegisterDeviceMap); err == nil {
		m.region = p
		if m.devBase, err = cu.MemHostGetDevicePointer(p); err != nil {
			m.noDev = "no device address for the segment: " + err.Error()
		}
	} else {
		m.noDev = "mapping the segment for the device: " + err.Error()
		p = unsafe.Pointer(unsafe.SliceData(data))
		if err := cu.MemHostRegister(p, uint64(len(data)), cu.HostRegisterPortable); err != nil {
			return fail(fmt.Errorf("gpushm: page-locking the %d-byte shared segment: %w", len(data), err))
		}
		m.region = p
	}
	if m.noDev == "" {
		if why := m.setupDevicePath(probe); why != "" {
			m.noDev = why
			m.fns = nil
		}
	}
	return m, nil
}

// setupDevicePath loads the kernels and checks that the device's stream
// can wait on a mapped word; it returns why not, or "".
func (m *Mover) setupDevicePath(probe *uint32) string {
	if !cu.StreamMemOps() {
		return "the driver has no stream memory operations"
	}
	mod, err := m.dev.LoadModule("gpushm", gpushmKernels)
	if err != nil {
		return "compiling the reduction kernels: " + err.Error()
	}
	m.fns = map[backend.DType]cu.Function{}
	for dt, name := range map[backend.DType]string{backend.Float32: "gpushm_allreduce_f32", backend.Int32: "gpushm_allreduce_i32", backend.Int64: "gpushm_allreduce_i64"} {
		f, err := mod.Func(name)
		if err != nil {
			return err.Error()
		}
		m.fns[dt] = f
	}
	// Write 1 to the probe word from the stream and wait for it there,
	// then for 2 written by the host: the mapped word works both ways.
	atomic.StoreUint32(probe, 0)
	a := m.devAddr(unsafe.Pointer(probe))
	if err := m.sIn.WriteValue32(a, 1, cu.WriteValueDefault); err != nil {
		return "cuStreamWriteValue32 on the mapped segment: " + err.Error()
	}
	if err := m.sIn.WaitValue32(a, 2, cu.WaitValueGEQ); err != nil {
		return "cuStreamWaitValue32 on the mapped segment: " + err.Error()
	}
	if err := m.begun.Record(m.sIn); err != nil {
		return err.Error()
	}
	dl := time.Now().Add(2 * time.Second)
	for atomic.LoadUint32(probe) != 1 {
		if time.Now().After(dl) {
			atomic.StoreUint32(probe, 2) // release the stream
			m.sIn.Synchronize()
			return "the device's write to the mapped segment never arrived"
		}
		time.Sleep(10 * time.Microsecond)
	}
	atomic.StoreUint32(probe, 2)
	for {
		ok, err := eventDone(m.begun)
		if err != nil {
			return err.Error()
		}
		if ok {
			return ""
		}
		if time.Now().After(dl) {
			return "the device never saw the host's write to the mapped segment"
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// devAddr is the device address of p, inside the registered region.
func (m *Mover) devAddr(p unsafe.Pointer) cu.DevPtr {
	return m.devBase + cu.DevPtr(uintptr(p)-uintptr(m.region))
}

// release frees what NewMover made; the context must be current.
func (m *Mover) release() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, s := range []cu.Stream{m.sIn, m.sOut} {
		if s != 0 {
			keep(s.Synchronize())
		}
	}
	if m.region != nil {
		keep(cu.MemHostUnregister(m.region))
		m.region = nil
	}
	evs := []cu.Event{m.begun, m.cal}
	for _, l := range [][]cu.Event{m.in, m.out, m.marks, m.starts, m.cals} {
		evs = append(evs, l...)
	}
	for _, e := range evs {
		if e != 0 {
			keep(e.Destroy())
		}
	}
	m.in, m.out, m.marks, m.starts, m.cals, m.begun, m.cal = nil, nil, nil, nil, nil, 0, 0
	for _, s := range []cu.Stream{m.sIn, m.sOut} {
		if s != 0 {
			keep(s.Destroy())
		}
	}
	m.sIn, m.sOut = 0, 0
	keep(m.cudev.PrimaryCtxRelease())
	return first
}

// Close releases the streams, events and page-locked region. The caller
// has waited for the device-path work (which reads the segment) first.
func (m *Mover) Close() error {
	unbind, err := m.ctx.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	return m.release()
}

// Bind locks the calling goroutine to its thread with the device's
// context current and returns the undo (returned even on error).
func (m *Mover) Bind() (func(), error) { return m.ctx.Bind() }

func devPtr(b backend.Buffer) (cu.DevPtr, error) {
	cb, ok := b.(*cuda.Buffer)
	if !ok {
		return 0, fmt.Errorf("gpushm: %T is not a CUDA buffer", b)
	}
	return cb.Ptr(), nil
}

// Begin orders the copies that follow (ToHost, ToDevice) after the work
// already queued on the device's stream.
func (m *Mover) Begin() error {
	if m.trace {
		if err := m.cal.Record(m.sOut); err != nil {
			return err
		}
	}
	if err := m.dev.Do(func(l *cuda.Locked) error { return m.begun.Record(l.Stream()) }); err != nil {
		return err
	}
	if err := m.sIn.WaitEvent(m.begun); err != nil {
		return err
	}
	return m.sOut.WaitEvent(m.begun)
}

// ToHost queues a copy of len(dst) bytes of buf (a buffer of the GPU) from
// byte off into dst, a part of the registered data, tracked as slot s of
// the input side (InDone).
func (m *Mover) ToHost(s int, dst []byte, buf backend.Buffer, off int) error {
	p, err := devPtr(buf)
	if err != nil {
		return err
	}
	if len(dst) == 0 {
		return m.in[s].Record(m.sIn)
	}
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), p+cu.DevPtr(off), uint64(len(dst)), m.sIn); err != nil {
		return err
	}
	return m.in[s].Record(m.sIn)
}

// ToDevice queues a copy of src, a part of the registered data, into buf
// at byte off, tracked as slot s of the result side (OutDone).
func (m *Mover) ToDevice(s int, buf backend.Buffer, off int, src []byte) error {
	p, err := devPtr(buf)
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return m.out[s].Record(m.sOut)
	}
	if err := cu.MemcpyHtoDAsync(p+cu.DevPtr(off), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), m.sOut); err != nil {
		return err
	}
	return m.out[s].Record(m.sOut)
}

// InDone reports whether slot s's last ToHost has completed.
func (m *Mover) InDone(s int) (bool, error) { return eventDone(m.in[s]) }

// OutDone reports whether slot s's last ToDevice has completed.
func (m *Mover) OutDone(s int) (bool, error) { return eventDone(m.out[s]) }

// PipeTiming returns, after a traced host-pipeline operation, the device
// times from the calibration mark to the start of the operation (the
// device's stream reached it), to the last copy-in of slot sIn and to the
// last copy-out of slot sOut.
func (m *Mover) PipeTiming(sIn, sOut int) (begun, in, out time.Duration, ok bool) {
	if !m.trace {
		return 0, 0, 0, false
	}
	b, e1 := cu.ElapsedMs(m.cal, m.begun)
	i, e2 := cu.ElapsedMs(m.cal, m.in[sIn])
	o, e3 := cu.ElapsedMs(m.cal, m.out[sOut])
	if e1 != nil || e2 != nil || e3 != nil {
		return 0, 0, 0, false
	}
	return ms(b), ms(i), ms(o), true
}

func ms(v float32) time.Duration { return time.Duration(float64(v) * 1e6) }

// DevicePath returns why the device path (Queue) is unavailable, or "".
func (m *Mover) DevicePath() string {
	if m.fns == nil {
		return m.noDev
	}
	return ""
}

// Op is one all-reduce on the device path, cut into chunks: what comm/
// gpushm's device path queues (its devOp says what the steps mean).
type Op struct {
	Ticket  uint64         // the op's number; ops complete in order
	Buf     backend.Buffer // a buffer of the GPU, reduced in place
	DType   backend.DType
	Red     comm.ReduceOp
	Rank, N int
	Chunks  []Chunk
	Trace   bool // time the op (Timing)
}

// Chunk is one chunk of an Op. The flags and inputs lie in the registered
// region.
type Chunk struct {
	Off, Bytes int       // within Buf
	U          uint32    // use of the chunk's slot
	Inputs     [][]byte  // every rank's input slot
	WaitDone   []*uint32 // peers' done flags, wait for >= U
	WaitIn     []*uint32 // every rank's in flag (this rank's too), wait for >= U+1
	MyIn       *uint32
	MyDone     *uint32
}

// Queue puts op's copy side on the mover's copy-in stream, after the
// work already on the device's stream, and its reduce side on the
// device's stream, so the copy of chunk c+1 overlaps the
// reduction of chunk c; an op of one chunk goes on the device's stream
// alone. Every wait is queued after the work it waits for
// on this device (the copy side's flag writes come first), so the order
// stays acyclic even where the two streams share a hardware queue.
func (m *Mover) Queue(op *Op) error {
	f, ok := m.fns[op.DType]
	if !ok {
		return fmt.Errorf("gpushm: no device reduction for %v", op.DType)
	}
	p, err := devPtr(op.Buf)
	if err != nil {
		return err
	}
	if len(op.Chunks) == 0 {
		return nil
	}
	k := int(op.Ticket % uint64(len(m.marks)))
	if op.Trace {
		if err := m.cals[k].Record(m.sOut); err != nil {
			return err
		}
	}
	in0 := op.Chunks[0].Inputs
	stride := int64(0)
	if op.N > 1 {
		stride = int64(uintptr(unsafe.Pointer(unsafe.SliceData(in0[1]))) - uintptr(unsafe.Pointer(unsafe.SliceData(in0[0]))))
	}
	es := op.DType.Size()
	return m.dev.Do(func(l *cuda.Locked) error {
		s := l.Stream()
		if op.Trace {
			if err := m.starts[k].Record(s); err != nil {
				return err
			}
		}
		// One chunk has nothing to overlap: its copy goes on the device's
		// stream too, which then need not wait for this rank's own flag
		// (measured on 2 H200s: 93 us for 808 KiB, against 127 us with the
		// hand-over between streams).
		cs := m.sIn
		if len(op.Chunks) == 1 {
			cs = s
		} else {
			if err := m.begun.Record(s); err != nil {
				return err
			}
			if err := m.sIn.WaitEvent(m.begun); err != nil {
				return err
			}
		}
		for _, c := range op.Chunks {
			for _, w := range c.WaitDone {
				if err := cs.WaitValue32(m.devAddr(unsafe.Pointer(w)), c.U, cu.WaitValueGEQ); err != nil {
					return err
				}
			}
			mine := unsafe.Pointer(unsafe.SliceData(c.Inputs[op.Rank]))
			if err := cu.MemcpyDtoHAsync(mine, p+cu.DevPtr(c.Off), uint64(c.Bytes), cs); err != nil {
				return err
			}
			if err := cs.WriteValue32(m.devAddr(unsafe.Pointer(c.MyIn)), c.U+1, cu.WriteValueDefault); err != nil {
				return err
			}
		}
		for _, c := range op.Chunks {
			for _, w := range c.WaitIn {
				if w == c.MyIn && cs == s {
					continue // ordered on this stream already
				}
				if err := s.WaitValue32(m.devAddr(unsafe.Pointer(w)), c.U+1, cu.WaitValueGEQ); err != nil {
					return err
				}
			}
			base := m.devAddr(unsafe.Pointer(unsafe.SliceData(c.Inputs[0])))
			count := int64(c.Bytes / es)
			if err := l.Launch1D(f, count, cu.P(p+cu.DevPtr(c.Off)), cu.P(base), cu.I64(stride), cu.I32(int32(op.N)), cu.I32(int32(op.Rank)),
				cu.I64(count), cu.I32(opCode(op.Red))); err != nil {
				return err
			}
			if err := s.WriteValue32(m.devAddr(unsafe.Pointer(c.MyDone)), c.U+1, cu.WriteValueDefault); err != nil {
				return err
			}
		}
		m.markTicks[k] = op.Ticket
		return m.marks[k].Record(s)
	})
}

// Done reports whether op number ticket has completed (only the last
// slots tickets may be asked about).
func (m *Mover) Done(ticket uint64) (bool, error) {
	k := int(ticket % uint64(len(m.marks)))
	if m.markTicks[k] != ticket {
		return false, fmt.Errorf("gpushm: device-path op %d is no longer tracked", ticket)
	}
	return eventDone(m.marks[k])
}

// Timing returns, for a completed op queued with Trace, the device time
// from the calibration mark to the start and the end of the op.
func (m *Mover) Timing(ticket uint64) (start, end time.Duration, ok bool) {
	k := int(ticket % uint64(len(m.marks)))
	if !m.trace || m.markTicks[k] != ticket {
		return 0, 0, false
	}
	a, e1 := cu.ElapsedMs(m.cals[k], m.starts[k])
	b, e2 := cu.ElapsedMs(m.cals[k], m.marks[k])
	if e1 != nil || e2 != nil {
		return 0, 0, false
	}
	return ms(a), ms(b), true
}
