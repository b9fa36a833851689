//go:build linux

package gpushm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-gnn/strata/comm"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/shm"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/internal/cudacomm"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func withTimeout(ctx context.Context, o Options) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	to := o.Timeout
	if to <= 0 {
		to = comm.DefaultTimeout
	}
	return context.WithTimeout(ctx, to)
}

// Open opens this rank's GPU shared-memory communicator on be (a CUDA
// device; the CPU back end works too, for tests) through the store: rank
// 0 creates the segment in o.Dir and publishes its name, every rank maps
// and page-locks it, and rank 0 removes the name once all have mapped it.
// A host shm communicator for the other operations is opened the same way
// (prefix o.Prefix+"/host"). All ranks must be on one host.
func Open(ctx context.Context, store rendezvous.Store, be backend.Backend, o Options) (comm.Comm, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, o)
	defer cancel()
	rank, n := store.Rank(), store.Size()
	l, err := newLayout(n, o.slots(), o.chunk())
	if err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		dir = "/dev/shm"
	}
	key := o.prefix() + "/segment"
	var f *os.File
	if rank == 0 {
		id := make([]byte, 8)
		rand.Read(id)
		path := filepath.Join(dir, fmt.Sprintf("strata-gpushm-%d-%s", os.Getpid(), hex.EncodeToString(id)))
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("gpushm: creating the segment: %w", err)
		}
		defer os.Remove(path) // every rank has it mapped when Open returns
		if err := initSegment(f, l); err != nil {
			f.Close()
			return nil, err
		}
		if err := store.Set(ctx, key, []byte(path)); err != nil {
			f.Close()
			return nil, err
		}
	} else {
		v, err := store.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("gpushm rank %d: waiting for rank 0's segment: %w", rank, err)
		}
		path := string(v)
		if filepath.Dir(path) != filepath.Clean(dir) || !strings.HasPrefix(filepath.Base(path), "strata-gpushm-") {
			return nil, fmt.Errorf("gpushm rank %d: rank 0 published an unexpected segment path %q", rank, path)
		}
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return nil, fmt.Errorf("gpushm rank %d: opening %s (are all ranks on one host?): %w", rank, path, err)
		}
	}
	defer f.Close()
	host, err := shm.New(ctx, store, shm.Options{Options: comm.Options{Timeout: o.Timeout}, HeapBytes: o.hostHeap(), Prefix: o.prefix() + "/host"})
	if err != nil {
		return nil, err
	}
	t, err := attachT(ctx, f, rank, n, be, host, o)
	if err != nil {
		host.Close()
		return nil, err
	}
	return comm.NewDevice(t, o.Options), nil
}

// NewLocal opens a group of n communicators in this process (goroutine
// ranks, rank r on bes[r]) on one memfd segment, with an shm.NewLocal
// host group; for tests.
func NewLocal(bes []backend.Backend, o Options) ([]comm.Comm, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	n := len(bes)
	l, err := newLayout(n, o.slots(), o.chunk())
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("strata-gpushm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("gpushm: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "strata-gpushm")
	defer f.Close()
	if err := initSegment(f, l); err != nil {
		return nil, err
	}
	hosts, err := shm.NewLocal(n, shm.Options{Options: comm.Options{Timeout: o.Timeout}, HeapBytes: o.hostHeap()})
	if err != nil {
		return nil, err
	}
	ts := make([]*transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := withTimeout(context.Background(), o)
			defer cancel()
			ts[r], errs[r] = attachT(ctx, f, r, n, bes[r], hosts[r], o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for r, t := range ts {
			if t != nil {
				t.Close()
			} else {
				hosts[r].Close()
			}
		}
		return nil, err
	}
	cs := make([]comm.Comm, n)
	for r, t := range ts {
		cs[r] = comm.NewDevice(t, o.Options)
	}
	return cs, nil
}

func attachT(ctx context.Context, f *os.File, rank, n int, be backend.Backend, host comm.Comm, o Options) (*transport, error) {
	seg, err := attach(f, rank, n)
	if err != nil {
		return nil, err
	}
	if err := seg.WaitAttached(ctx); err != nil {
		seg.Unmap()
		return nil, err
	}
	trace := envBool(EnvTrace)
	var mv mover
	_, isCPU := be.(*cpu.Backend)
	switch {
	case cudacomm.IsGPU(be):
		mv, err = newCudaMover(be, seg.Mem[seg.L.CtlOff:seg.L.HeapOff], seg.Data(), seg.U32(seg.Ctl(rank)+cProbe), seg.L.Slots, trace)
	case isCPU:
		mv = newHostMover(seg.L.Slots, o.asyncHostCopies, o.emulate)
	default:
		err = fmt.Errorf("gpushm: back end %s is neither CUDA nor CPU", be.Name())
	}
	if err != nil {
		seg.Unmap()
		return nil, err
	}
	t := &transport{Transport: staged.New(host, be, comm.KindGPUShm), seg: seg, rank: rank, n: n, be: be, mv: mv,
		pids: make([]int, n), pieces: make(chan piece, 4*o.workers(n)), chunks: o.chunks(), inline: o.inlineMax(),
		goSleep: o.Idle == IdleGoSleep}
	for r := range t.pids {
		t.pids[r] = int(atomic.LoadInt32((*int32)(unsafe.Pointer(&seg.Mem[seg.Ctl(r)+sg.CPid]))))
	}
	t.st, t.noDev = mv.stream()
	t.devChunk = o.deviceChunk(seg.L.SlotBytes)
	if t.devMax = o.deviceMax(); t.devMax == 0 {
		t.st, t.noDev = nil, "off (DeviceMax)"
	}
	if t.st != nil {
		t.inputs = make([][][]byte, seg.L.Slots)
		for s := range t.inputs {
			for r := 0; r < n; r++ {
				t.inputs[s] = append(t.inputs[s], seg.InSlot(r, s))
			}
		}
		if t.async = o.Async; t.async {
			t.wake, t.wdStop, t.wdDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
			go t.watchdog()
		}
	}
	if trace {
		t.tr = &tracer{rank: rank, path: fmt.Sprintf("on up to %d bytes in chunks of %d (async %v)", t.devMax, t.devChunk, t.async)}
		if t.st == nil {
			t.tr.path = "off: " + t.noDev
		}
	}
	for i := 0; i < o.workers(n); i++ {
		t.workers.Add(1)
		go t.worker()
	}
	return t, nil
}

// transport runs all-reduce through the segment and stages the other
// operations through the host communicator (the embedded Transport).
type transport struct {
	*staged.Transport
	seg     segment
	rank, n int
	be      backend.Backend
	mv      mover
	pids    []int

	q        uint64 // chunks streamed so far, identical on every rank
	lastDone uint64 // last operation completed

	runMu   sync.Mutex
	closing atomic.Bool

	pieces  chan piece
	workers sync.WaitGroup
	chunks  int // target chunks per message
	inline  int // largest share reduced on the pipeline's goroutine
	goSleep bool

	// Device path (st nil: off, noDev says why); guarded by runMu.
	st       streamer
	noDev    string
	devMax   int
	devChunk int
	async    bool
	inputs   [][][]byte // per slot, every rank's input slot
	ticket   uint64     // device-path ops queued so far
	pend     []*pendOp  // queued and not yet seen complete, oldest first
	asyncErr error      // failure of an op that had returned (async)
	wake     chan struct{}
	wdStop   chan struct{}
	wdDone   chan struct{}

	tr *tracer // phase times (EnvTrace), or nil
}

func (t *transport) Kind() string { return comm.KindGPUShm }

// Caps: the segment's all-reduce adds in rank order on the host and on
// the device path alike (the other operations move data unchanged).
func (t *transport) Caps() comm.Caps { return comm.Caps{Overlap: true, RankOrderSum: true} }

// closeWait bounds how long Close waits for queued device-path ops.
const closeWait = 10 * time.Second

func (t *transport) Run(ctx context.Context, c *comm.DeviceCall) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closing.Load() {
		return comm.ErrClosed
	}
	if t.asyncErr != nil {
		return t.asyncErr
	}
	if err := t.checkAbort(); err != nil {
		return err
	}
	atomic.StoreUint64(t.seg.U64(t.seg.Ctl(t.rank)+sg.CEntered), c.Seq)
	var err error
	switch {
	case c.Op == comm.OpAllReduce && t.n == 1:
		// A group of one: the buffer holds the result already.
	case c.Op == comm.OpAllReduce && t.onDevice(c):
		err = t.devAllReduce(ctx, c)
	default:
		// Host-side work: let queued device-path ops finish first, so a
		// failure of theirs is reported before anything else runs.
		if err = t.joinAll(ctx, c.Deadline); err != nil {
			break
		}
		if c.Op == comm.OpAllReduce {
			err = t.allReduce(ctx, c)
		} else {
			err = t.Transport.Run(ctx, c)
		}
	}
	if err == nil {
		t.lastDone = c.Seq
	} else if !errors.Is(err, comm.ErrClosed) {
		// A peer's abort explains this failure better (this rank's own
		// abort, published by the device path, restates it).
		var ae *comm.AbortError
		if errors.As(t.checkAbort(), &ae) && ae.By != t.rank {
			return ae
		}
	}
	return err
}

func (t *transport) checkAbort() error { return t.seg.CheckAbort() }

func (t *transport) wakeAll() { t.seg.WakeAll() }

// Abort publishes the failure in the segment (peers waiting in an
// all-reduce fail with an *AbortError) and closes the host communicator.
func (t *transport) Abort(oe *comm.OpError) {
	t.seg.PublishAbort(t.rank, oe)
	t.Transport.Abort(oe)
}

// Missing returns the ranks that have not entered operation seq, or have
// left (closed before completing it, or exited).
func (t *transport) Missing(ctx context.Context, seq uint64) []int {
	var m []int
	for r := 0; r < t.n; r++ {
		c := t.seg.Ctl(r)
		if atomic.LoadUint64(t.seg.U64(c+sg.CEntered)) < seq || t.gone(r, seq) {
			m = append(m, r)
		}
	}
	return m
}

// gone reports whether rank r will not complete operation seq: it closed
// its communicator before completing it, or its process exited without
// closing.
func (t *transport) gone(r int, seq uint64) bool {
	if r == t.rank {
		return false
	}
	c := t.seg.Ctl(r)
	if atomic.LoadUint32(t.seg.U32(c+sg.CState)) == sg.StateClosed {
		return atomic.LoadUint64(t.seg.U64(c+cLeft)) < seq
	}
	return t.pids[r] != os.Getpid() && !sg.Alive(t.pids[r])
}

// Sync waits for the queued device-path ops (reporting a failure of
// theirs), then for the device.
func (t *transport) Sync(ctx context.Context) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.asyncErr != nil {
		return t.asyncErr
	}
	dl, _ := ctx.Deadline()
	if err := t.joinAll(ctx, dl); err != nil {
		return err
	}
	return t.Transport.Sync(ctx)
}

func (t *transport) Close() error {
	if t.closing.Swap(true) {
		return nil
	}
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.wdStop != nil {
		close(t.wdStop)
		<-t.wdDone
	}
	// Queued device-path ops read the segment and need the peers' flags:
	// let them finish (or fail and drain) before leaving.
	if len(t.pend) > 0 {
		if unbind, err := t.mv.bind(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeWait)
			t.join(ctx, time.Time{}, len(t.pend), true)
			cancel()
			unbind()
		} else {
			unbind()
		}
	}
	if t.tr != nil {
		t.tr.report(os.Stderr)
	}
	c := t.seg.Ctl(t.rank)
	atomic.StoreUint64(t.seg.U64(c+cLeft), t.lastDone)
	atomic.StoreUint32(t.seg.U32(c+sg.CState), sg.StateClosed)
	t.wakeAll()
	close(t.pieces)
	t.workers.Wait()
	err := t.mv.close()
	t.seg.Unmap()
	if e := t.Transport.Close(); err == nil {
		err = e
	}
	return err
}
