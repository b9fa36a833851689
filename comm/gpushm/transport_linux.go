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
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/reduce"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/shm"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
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
func Open(ctx context.Context, store rendezvous.Store, be backend.Backend, o Options) (comm.DeviceComm, error) {
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
func NewLocal(bes []backend.Backend, o Options) ([]comm.DeviceComm, error) {
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
	cs := make([]comm.DeviceComm, n)
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
	var mv mover
	switch d := be.(type) {
	case *cuda.Device:
		mv, err = newCudaMover(d, seg.Data(), seg.L.Slots)
	case *cpu.Backend:
		mv = newHostMover(seg.L.Slots, o.asyncHostCopies)
	default:
		err = fmt.Errorf("gpushm: back end %s is neither CUDA nor CPU", be.Name())
	}
	if err != nil {
		seg.Unmap()
		return nil, err
	}
	t := &transport{Transport: staged.New(host, be, comm.KindGPUShm), seg: seg, rank: rank, n: n, be: be, mv: mv,
		pids: make([]int, n), pieces: make(chan piece, 4*o.workers(n)), chunks: fromEnv(EnvChunks, DefaultChunks), inline: o.inlineMax()}
	for r := range t.pids {
		t.pids[r] = int(atomic.LoadInt32((*int32)(unsafe.Pointer(&seg.Mem[seg.Ctl(r)+sg.CPid]))))
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
}

func (t *transport) Kind() string { return comm.KindGPUShm }

func (t *transport) Run(ctx context.Context, c *comm.DeviceCall) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closing.Load() {
		return comm.ErrClosed
	}
	if err := t.checkAbort(); err != nil {
		return err
	}
	atomic.StoreUint64(t.seg.U64(t.seg.Ctl(t.rank)+sg.CEntered), c.Seq)
	var err error
	if c.Op == comm.OpAllReduce {
		err = t.allReduce(ctx, c)
	} else {
		err = t.Transport.Run(ctx, c)
	}
	if err == nil {
		t.lastDone = c.Seq
	} else if !errors.Is(err, comm.ErrClosed) {
		if ae := t.checkAbort(); ae != nil {
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

func (t *transport) Close() error {
	if t.closing.Swap(true) {
		return nil
	}
	t.runMu.Lock()
	defer t.runMu.Unlock()
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

// --- all-reduce ---

// job is one all-reduce.
type job struct {
	c       *comm.DeviceCall
	es      int
	bytes   int
	cb, nq  int
	q0      uint64       // global index of chunk 0
	redDone atomic.Int32 // chunks whose share this rank has reduced
}

func (j *job) chunk(i int) (lo, hi int) {
	lo = i * j.cb
	return lo, min(lo+j.cb, j.bytes)
}

// piece is part of this rank's share of one chunk, for a reducer.
type piece struct {
	j      *job
	slot   int
	u      uint32
	lo, hi int // bytes within the chunk
	left   *atomic.Int32
}

// chunkBytes cuts b bytes into about t.chunks chunks of minPipeChunk to
// the segment's chunk size, multiples of 4096.
func (t *transport) chunkBytes(b int) int {
	c := sg.AlignUp((b+t.chunks-1)/t.chunks, page)
	return min(max(c, minPipeChunk), t.seg.L.SlotBytes)
}

func (t *transport) slotOf(q uint64) (int, uint32) {
	return int(q % uint64(t.seg.L.Slots)), uint32(q / uint64(t.seg.L.Slots))
}

// allAt reports whether flag(r, s) has reached want for every rank r, and
// otherwise the first rank that has not.
func (t *transport) allAt(flag func(r, s int) *uint32, s int, want uint32) (bool, int) {
	for r := 0; r < t.n; r++ {
		if !sg.Reached(atomic.LoadUint32(flag(r, s)), want) {
			return false, r
		}
	}
	return true, -1
}

func (t *transport) allReduce(ctx context.Context, c *comm.DeviceCall) error {
	es := c.DType.Size()
	b := c.Recv.Len() * es
	if b == 0 {
		return nil
	}
	j := &job{c: c, es: es, bytes: b, cb: t.chunkBytes(b), q0: t.q}
	j.nq = (b + j.cb - 1) / j.cb
	defer func() { t.q += uint64(j.nq) }()
	unbind, err := t.mv.bind()
	defer unbind()
	if err != nil {
		return err
	}
	if err := t.mv.begin(c.Recv); err != nil {
		return err
	}
	seg, me, slots := t.seg, t.rank, t.seg.L.Slots
	var issued, inDone, redIssued, outIssued, outDone int
	w := &idler{t: t, ctx: ctx, dl: c.Deadline, seq: c.Seq, last: time.Now()}
	fail := func(err error) error {
		t.drain(j, issued, inDone, redIssued, outIssued, outDone)
		return err
	}
	for outDone < j.nq {
		progress := false
		w.who, w.what = -1, ""
		// 1. Copy-in, when every rank is done with the slot's last chunk.
		for issued < j.nq && issued-outDone < slots {
			s, u := t.slotOf(j.q0 + uint64(issued))
			if ok, r := t.allAt(seg.doneFlag, s, u); !ok {
				w.who, w.what = r, "a shared slot to be free"
				break
			}
			lo, hi := j.chunk(issued)
			if err := t.mv.toHost(s, seg.InSlot(me, s)[:hi-lo], c.Recv, lo); err != nil {
				return fail(err)
			}
			issued++
			progress = true
		}
		// 2. Copy-in complete: announce it.
		for inDone < issued {
			s, u := t.slotOf(j.q0 + uint64(inDone))
			ok, err := t.mv.inDone(s)
			if err != nil {
				return fail(err)
			}
			if !ok {
				break
			}
			sg.Set(seg.inFlag(me, s), u+1)
			inDone++
			progress = true
		}
		// 3. Reduce this rank's share once every rank's chunk is in (at
		// most two chunks queued for the reducers).
		for redIssued < inDone && redIssued-int(j.redDone.Load()) < 2 {
			s, u := t.slotOf(j.q0 + uint64(redIssued))
			if ok, r := t.allAt(seg.inFlag, s, u+1); !ok {
				w.who, w.what = r, "its share of a chunk"
				break
			}
			t.dispatch(j, redIssued, s, u)
			redIssued++
			progress = true
		}
		// 4. Copy-out once every rank has reduced its share.
		for outIssued < redIssued {
			s, u := t.slotOf(j.q0 + uint64(outIssued))
			if ok, r := t.allAt(seg.redFlag, s, u+1); !ok {
				w.who, w.what = r, "a reduced chunk"
				break
			}
			lo, hi := j.chunk(outIssued)
			if err := t.mv.toDevice(s, c.Recv, lo, seg.ResSlot(s)[:hi-lo]); err != nil {
				return fail(err)
			}
			outIssued++
			progress = true
		}
		// 5. Copy-out complete: the slot may be reused.
		for outDone < outIssued {
			s, u := t.slotOf(j.q0 + uint64(outDone))
			ok, err := t.mv.outDone(s)
			if err != nil {
				return fail(err)
			}
			if !ok {
				break
			}
			sg.Set(seg.doneFlag(me, s), u+1)
			outDone++
			progress = true
		}
		if progress {
			w.progress()
			continue
		}
		if err := w.idle(); err != nil {
			return fail(err)
		}
	}
	return nil
}

// dispatch queues this rank's share of chunk i for the reducers.
func (t *transport) dispatch(j *job, i, s int, u uint32) {
	lo, hi := j.chunk(i)
	elems := (hi - lo) / j.es
	a := lo + t.rank*elems/t.n*j.es
	z := lo + (t.rank+1)*elems/t.n*j.es
	a, z = a-lo, z-lo // within the chunk
	share := z - a
	if share == 0 {
		sg.Set(t.seg.redFlag(t.rank, s), u+1)
		j.redDone.Add(1)
		return
	}
	left := new(atomic.Int32)
	if share <= t.inline {
		// Small: reduce here, sparing the reducers' wake-up.
		left.Store(1)
		t.reduce(piece{j: j, slot: s, u: u, lo: a, hi: z, left: left})
		return
	}
	k := min(cap(t.pieces)/4, max(1, share/(64<<10)))
	left.Store(int32(k))
	for p := 0; p < k; p++ {
		pa := a + p*(share/j.es)/k*j.es
		pz := a + (p+1)*(share/j.es)/k*j.es
		t.pieces <- piece{j: j, slot: s, u: u, lo: pa, hi: pz, left: left}
	}
}

// subBlock keeps a reduction's working set in cache.
const subBlock = 32 << 10

// worker reduces pieces: out = x_0 op x_1 op ... op x_{n-1} in rank
// order, where x_r is rank r's input slot, into the result slot.
func (t *transport) worker() {
	defer t.workers.Done()
	for p := range t.pieces {
		t.reduce(p)
	}
}

// reduce computes piece p; the last piece of a chunk raises this rank's
// red flag.
func (t *transport) reduce(p piece) {
	c := p.j.c
	out := t.seg.ResSlot(p.slot)
	blk := subBlock / p.j.es * p.j.es
	for a := p.lo; a < p.hi; a += blk {
		b := min(a+blk, p.hi)
		if t.n == 1 {
			copy(out[a:b], t.seg.InSlot(0, p.slot)[a:b])
		} else {
			reduce.Into3(c.DType, c.Red, out[a:b], t.seg.InSlot(0, p.slot)[a:b], t.seg.InSlot(1, p.slot)[a:b])
			for r := 2; r < t.n; r++ {
				reduce.Into(c.DType, c.Red, out[a:b], t.seg.InSlot(r, p.slot)[a:b])
			}
		}
		reduce.Finish(c.DType, c.Red, out[a:b], t.n)
	}
	if p.left.Add(-1) == 0 {
		sg.Set(t.seg.redFlag(t.rank, p.slot), p.u+1)
		p.j.redDone.Add(1)
	}
}

// drain waits (briefly) for the copies and reductions already queued by
// a failing all-reduce, so none of them lands after it returns.
func (t *transport) drain(j *job, issued, inDone, redIssued, outIssued, outDone int) {
	dl := time.Now().Add(2 * time.Second)
	for time.Now().Before(dl) {
		busy := int(j.redDone.Load()) < redIssued
		for i := inDone; i < issued && !busy; i++ {
			s, _ := t.slotOf(j.q0 + uint64(i))
			ok, err := t.mv.inDone(s)
			busy = !ok && err == nil
		}
		for i := outDone; i < outIssued && !busy; i++ {
			s, _ := t.slotOf(j.q0 + uint64(i))
			ok, err := t.mv.outDone(s)
			busy = !ok && err == nil
		}
		if !busy {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// idler backs off while the pipeline waits and checks, while it does, the
// deadline, the abort word and the ranks it depends on.
type idler struct {
	t        *transport
	ctx      context.Context
	dl       time.Time
	seq      uint64
	last     time.Time // last progress
	lastLive time.Time
	who      int // rank waited for (-1: this rank's copies or reducers)
	what     string
}

func (w *idler) progress() { w.last = time.Now() }

// spinFor is how long an idle pipeline spins (yielding) before it
// sleeps: long where cores are plentiful (a sleep delays the next copy by
// tens of microseconds), short on small machines.
var spinFor = func() time.Duration {
	if runtime.NumCPU() >= 8 {
		return 500 * time.Microsecond
	}
	return 50 * time.Microsecond
}()

func (w *idler) idle() error {
	since := time.Since(w.last)
	switch {
	case since < spinFor:
		runtime.Gosched()
		return nil
	case since < 20*time.Millisecond:
		time.Sleep(20 * time.Microsecond)
	default:
		time.Sleep(500 * time.Microsecond)
	}
	t := w.t
	if err := t.checkAbort(); err != nil {
		return err
	}
	if t.closing.Load() {
		return comm.ErrClosed
	}
	what := "its own copies"
	if w.who >= 0 {
		what = fmt.Sprintf("rank %d (%s)", w.who, w.what)
	}
	if err := w.ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		return fmt.Errorf("%w: waiting for %s", err, what)
	}
	if !w.dl.IsZero() && time.Until(w.dl) <= 0 {
		return fmt.Errorf("waiting for %s: %w", what, context.DeadlineExceeded)
	}
	if time.Since(w.lastLive) > 100*time.Millisecond || w.who >= 0 && w.lastLive.IsZero() {
		w.lastLive = time.Now()
		for r := 0; r < t.n; r++ {
			if r != t.rank && t.gone(r, w.seq) {
				return &comm.PeerError{Ranks: []int{r}, Err: comm.ErrPeerLost,
					Msg: fmt.Sprintf("rank %d closed its communicator or exited (while this rank waited for %s)", r, what)}
			}
		}
	}
	return nil
}
