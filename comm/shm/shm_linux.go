//go:build linux

package shm

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
	"github.com/strata-gnn/strata/comm/internal/direct"
	"github.com/strata-gnn/strata/comm/internal/reduce"
	sg "github.com/strata-gnn/strata/comm/internal/segment"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

// Defaults.
const (
	DefaultSlotBytes = 1 << 20
	minChunk         = 16 << 10
)

// Options configure a shared-memory communicator.
type Options struct {
	comm.Options
	// SlotBytes is the largest chunk (DefaultSlotBytes if zero; a multiple
	// of 4096).
	SlotBytes int
	// Slots is K, the chunks in flight (2 per rank, at least 4, if zero).
	Slots int
	// HeapBytes is each rank's share of the segment for Comm.Alloc
	// (rounded up to 4096; 0: none, Alloc uses the Go heap). Collectives
	// whose buffers all come from it run without staging copies.
	HeapBytes int
	// Reducer picks who reduces this rank's chunks of an all-reduce:
	// "goroutine" (the persistent reducer, overlapping with this rank's
	// copies), "inline" (the calling goroutine, in windows of K chunks),
	// or "" / "auto": goroutine when there are at least two CPUs per rank.
	Reducer string
	// Dir holds named segments (/dev/shm if empty).
	Dir string
	// Prefix namespaces the store keys ("shm" if empty).
	Prefix string
}

func (o Options) layout(n int) (layout, error) {
	slot := o.SlotBytes
	if slot == 0 {
		slot = DefaultSlotBytes
	}
	k := o.Slots
	if k == 0 {
		k = max(4, 2*n)
	}
	return newLayout(n, k, slot, sg.AlignUp(o.HeapBytes, page))
}

// CreateFile makes an initialized anonymous segment (memfd) for n ranks.
// Hand it to child processes (exec.Cmd.ExtraFiles) and call Attach in
// each; the creator may close its copy once the children have started.
func CreateFile(n int, o Options) (*os.File, error) {
	l, err := o.layout(n)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("strata-shm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "strata-shm")
	if err := initSegment(f, l); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Attach opens rank's communicator on a segment made by CreateFile (or
// New) for n ranks, and waits (bounded by ctx, else o.Timeout) until every
// rank has attached, naming those that never did.
func Attach(ctx context.Context, f *os.File, rank, n int, o Options) (comm.Comm, error) {
	t, err := attachT(ctx, f, rank, n, o)
	if err != nil {
		return nil, err
	}
	return comm.New(t, o.Options), nil
}

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

func attachT(ctx context.Context, f *os.File, rank, n int, o Options) (*transport, error) {
	ctx, cancel := withTimeout(ctx, o)
	defer cancel()
	seg, err := attach(f, rank, n)
	if err != nil {
		return nil, err
	}
	if err := seg.WaitAttached(ctx); err != nil {
		seg.Unmap()
		return nil, err
	}
	var inline bool
	switch o.Reducer {
	case "", "auto":
		inline = runtime.NumCPU() < 2*n
	case "inline":
		inline = true
	case "goroutine":
	default:
		seg.Unmap()
		return nil, fmt.Errorf("shm: Reducer %q, want auto, goroutine or inline", o.Reducer)
	}
	t := &transport{seg: seg, rank: rank, n: n, k: seg.L.Slots, slot: seg.L.SlotBytes, inline: inline,
		pids: make([]int, n), heap: newHeap(seg.Heap(rank))}
	for r := range t.pids {
		t.pids[r] = int(atomic.LoadInt32((*int32)(unsafe.Pointer(&seg.Mem[seg.Ctl(r)+sg.CPid]))))
	}
	if !t.inline {
		t.jobs = make(chan reduceJob)
		t.done = make(chan error)
		go t.reducer()
	}
	return t, nil
}

// NewLocal opens a group of n communicators in this process on one memfd
// segment (goroutine ranks, each with its own mapping; for tests).
func NewLocal(n int, o Options) ([]comm.Comm, error) {
	f, err := CreateFile(n, o)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = Attach(context.Background(), f, r, n, o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return cs, nil
}

// New opens this rank's communicator through the store: rank 0 creates a
// named segment in o.Dir and publishes its name, the others open it, and
// rank 0 removes the name once every rank has mapped it (so nothing is
// left behind if the job dies later). All ranks must be on one host.
func New(ctx context.Context, store rendezvous.Store, o Options) (comm.Comm, error) {
	ctx, cancel := withTimeout(ctx, o)
	defer cancel()
	rank, n := store.Rank(), store.Size()
	dir := o.Dir
	if dir == "" {
		dir = "/dev/shm"
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = "shm"
	}
	var f *os.File
	var path string
	if rank == 0 {
		l, err := o.layout(n)
		if err != nil {
			return nil, err
		}
		id := make([]byte, 8)
		rand.Read(id)
		path = filepath.Join(dir, fmt.Sprintf("strata-%d-%s", os.Getpid(), hex.EncodeToString(id)))
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("shm: creating the segment: %w", err)
		}
		defer os.Remove(path) // also on success: every rank has it mapped by then
		if err := initSegment(f, l); err != nil {
			// No room for the heap (a small /dev/shm, e.g. Docker's 64 MiB):
			// go without it; Alloc then uses the Go heap and collectives
			// stage through the slots.
			if l.Heap == 0 || !errors.Is(err, unix.ENOSPC) {
				f.Close()
				return nil, err
			}
			if l, err = newLayout(l.N, l.Slots, l.SlotBytes, 0); err == nil {
				err = initSegment(f, l)
			}
			if err != nil {
				f.Close()
				return nil, err
			}
		}
		if err := store.Set(ctx, prefix+"/segment", []byte(path)); err != nil {
			f.Close()
			return nil, err
		}
	} else {
		v, err := store.Get(ctx, prefix+"/segment")
		if err != nil {
			return nil, fmt.Errorf("shm rank %d: waiting for rank 0's segment: %w", rank, err)
		}
		path = string(v)
		if filepath.Dir(path) != filepath.Clean(dir) || !strings.HasPrefix(filepath.Base(path), "strata-") {
			return nil, fmt.Errorf("shm rank %d: rank 0 published an unexpected segment path %q", rank, path)
		}
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return nil, fmt.Errorf("shm rank %d: opening %s (are all ranks on one host?): %w", rank, path, err)
		}
	}
	defer f.Close() // the mapping keeps the segment alive
	t, err := attachT(ctx, f, rank, n, o)
	if err != nil {
		return nil, err
	}
	return comm.New(t, o.Options), nil
}

type transport struct {
	seg        segment
	rank, n, k int
	slot       int
	inline     bool
	pids       []int
	heap       *heapAlloc

	q    uint64 // chunks streamed so far; identical on every rank
	exch uint64 // exchanges so far

	runMu    sync.Mutex // held by Run, and by Close while unmapping
	closing  atomic.Bool
	unmapped bool        // guarded by runMu
	failed   atomic.Bool // the reducer goroutine failed

	jobs chan reduceJob
	done chan error
}

func (t *transport) Kind() string { return "shm" }
func (t *transport) Rank() int    { return t.rank }
func (t *transport) Size() int    { return t.n }
func (t *transport) Caps() comm.Caps {
	return comm.Caps{Overlap: true, RankOrderSum: true}
}

// waiter carries what every wait checks besides its counter, and the
// header of the call's data.
type waiter struct {
	t   *transport
	ctx context.Context
	dl  time.Time
	c   *comm.Call
	hdr sg.Header
}

// publish stores the call's header in flag f's cache line and raises f to
// v: the slot it guards now holds this rank's data of the call.
func (w *waiter) publish(f *uint32, v uint32) {
	sg.SetHeader(f, w.hdr)
	sg.Set(f, v)
}

// check compares the header that rank who published with flag f (which
// has reached the use waited for) with this rank's call.
func (w *waiter) check(f *uint32, who int) error {
	h := sg.GetHeader(f)
	if h.Desc == w.hdr.Desc {
		return nil
	}
	return comm.PeerMismatch(w.hdr.Desc, h.Desc, w.t.rank, who)
}

// waitData waits until rank who has published its data of use u in the
// slot flag f guards, and checks that it belongs to this call.
func (w *waiter) waitData(f *uint32, want uint32, who int, what string) error {
	if err := w.wait(f, want, who, what); err != nil {
		return err
	}
	return w.check(f, who)
}

// setDesc publishes the operation this rank is entering (for peers whose
// wait is slow: see peerDesc).
func (t *transport) setDesc(h sg.Header) {
	c := t.seg.Ctl(t.rank) + cDesc
	ver := t.seg.U32(c)
	atomic.AddUint32(ver, 1) // odd: being written
	sg.SetHeader(ver, h)
	atomic.AddUint32(ver, 1)
}

// peerDesc reads the operation rank r last entered (ok false while it is
// being written).
func (t *transport) peerDesc(r int) (comm.Desc, bool) {
	ver := t.seg.U32(t.seg.Ctl(r) + cDesc)
	v1 := atomic.LoadUint32(ver)
	h := sg.GetHeader(ver)
	return h.Desc, v1%2 == 0 && atomic.LoadUint32(ver) == v1
}

// wait returns once *f has reached want (a value the rank `who` sets).
func (w *waiter) wait(f *uint32, want uint32, who int, what string) error {
	for i := 0; i < 200; i++ {
		if sg.Reached(atomic.LoadUint32(f), want) {
			return nil
		}
	}
	t := w.t
	lastLive := time.Now()
	for {
		atomic.AddUint32(sg.Waiters(f), 1)
		v := atomic.LoadUint32(f)
		if sg.Reached(v, want) {
			atomic.AddUint32(sg.Waiters(f), ^uint32(0))
			return nil
		}
		// An abort published before this rank counted itself as a waiter
		// woke nobody: look before sleeping.
		left := time.Until(w.dl)
		if left > 0 && atomic.LoadUint32(t.seg.U32(sg.HAbort)) == 0 {
			sg.Wait32(f, v, min(left, 50*time.Millisecond))
		}
		atomic.AddUint32(sg.Waiters(f), ^uint32(0))
		if sg.Reached(atomic.LoadUint32(f), want) {
			return nil
		}
		if err := t.checkAbort(); err != nil {
			return err
		}
		if t.closing.Load() {
			return comm.ErrClosed
		}
		if t.failed.Load() {
			return errReducer
		}
		if err := w.ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("waiting for rank %d (%s): %w", who, what, err)
			}
			return fmt.Errorf("%w: waiting for rank %d (%s)", err, who, what)
		}
		if time.Until(w.dl) <= 0 {
			return fmt.Errorf("waiting for rank %d (%s): %w", who, what, context.DeadlineExceeded)
		}
		if who != t.rank {
			// A rank in another operation or with another count may wait
			// on flags this rank never raises in this call (e.g. one side
			// exchanges buffer offsets, the other streams chunks). (The
			// debug check's exchange has the same number in another phase.)
			if d, ok := t.peerDesc(who); ok && d.Seq == w.c.Seq && d.Phase == w.c.Phase && d != w.hdr.Desc {
				return comm.PeerMismatch(w.hdr.Desc, d, t.rank, who)
			}
			if atomic.LoadUint32(t.seg.U32(t.seg.Ctl(who)+sg.CState)) == sg.StateClosed {
				return &comm.PeerError{Ranks: []int{who}, Err: comm.ErrPeerLost, Msg: fmt.Sprintf("rank %d closed its communicator (while this rank waited for %s)", who, what)}
			}
			if time.Since(lastLive) > 100*time.Millisecond {
				lastLive = time.Now()
				if pid := t.pids[who]; pid != os.Getpid() && !sg.Alive(pid) {
					return &comm.PeerError{Ranks: []int{who}, Err: comm.ErrPeerLost, Msg: fmt.Sprintf("rank %d (pid %d) exited (while this rank waited for %s)", who, pid, what)}
				}
			}
		}
	}
}

var errReducer = errors.New("shm: this rank's reducer failed")

// slotFree waits until every rank is done with the chunk that last used
// slot s (use u-1).
func (w *waiter) slotFree(s int, u uint32) error {
	if u == 0 {
		return nil
	}
	for j := 0; j < w.t.n; j++ {
		if err := w.wait(w.t.seg.outFlag(j, s), u, j, "a shared slot to be free"); err != nil {
			return err
		}
	}
	return nil
}

func (t *transport) checkAbort() error { return t.seg.CheckAbort() }

// wakeAll wakes every sleeper in the segment.
func (t *transport) wakeAll() { t.seg.WakeAll() }

func (t *transport) Abort(oe *comm.OpError) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.unmapped {
		return
	}
	t.seg.PublishAbort(t.rank, oe)
}

func (t *transport) Missing(ctx context.Context, seq uint64) []int {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.unmapped {
		return nil
	}
	// Missing: never entered seq, or left (closed, exited) without
	// finishing it.
	var m []int
	for r := 0; r < t.n; r++ {
		c := t.seg.Ctl(r)
		entered, done := atomic.LoadUint64(t.seg.U64(c+sg.CEntered)), atomic.LoadUint64(t.seg.U64(c+cDone))
		left := atomic.LoadUint32(t.seg.U32(c+sg.CState)) == sg.StateClosed || (t.pids[r] != os.Getpid() && !sg.Alive(t.pids[r]))
		if entered < seq || (left && done < seq) {
			m = append(m, r)
		}
	}
	return m
}

func (t *transport) Close() error {
	if t.closing.Swap(true) {
		return nil
	}
	atomic.StoreUint32(t.seg.U32(t.seg.Ctl(t.rank)+sg.CState), sg.StateClosed)
	t.wakeAll() // this rank's own waits end; peers waiting on it notice
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.jobs != nil {
		close(t.jobs)
		<-t.done
	}
	t.unmapped = true
	t.seg.Unmap()
	return nil
}

func (t *transport) Run(ctx context.Context, c *comm.Call) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closing.Load() {
		return comm.ErrClosed
	}
	if err := t.checkAbort(); err != nil {
		return err
	}
	w := &waiter{t: t, ctx: ctx, dl: c.Deadline, c: c, hdr: sg.HeaderOf(c, 0)}
	t.setDesc(w.hdr)
	atomic.StoreUint64(t.seg.U64(t.seg.Ctl(t.rank)+sg.CEntered), c.Seq)
	defer atomic.StoreUint64(t.seg.U64(t.seg.Ctl(t.rank)+cDone), c.Seq)
	done, err := t.tryDirect(w, c)
	if done || err != nil {
		if err != nil && !errors.Is(err, comm.ErrClosed) {
			if ae := t.checkAbort(); ae != nil {
				return ae
			}
		}
		return err
	}
	switch c.Op {
	case comm.OpAllReduce:
		err = t.allReduce(w, c)
	case comm.OpBroadcast:
		err = t.broadcast(w, c)
	case comm.OpAllGather, comm.OpAllGatherV:
		err = t.allGather(w, c)
	case comm.OpAllToAll, comm.OpAllToAllV:
		err = t.allToAll(w, c)
	case comm.OpReduceScatter:
		err = t.reduceScatter(w, c)
	case comm.OpBarrier:
		_, err = t.exchange(w, [exchWords]int64{})
	default:
		err = fmt.Errorf("shm: unsupported op %v", c.Op)
	}
	if err != nil && !errors.Is(err, comm.ErrClosed) {
		if ae := t.checkAbort(); ae != nil {
			return ae
		}
	}
	return err
}

// exchange publishes v and returns every rank's values. It is also the
// barrier: it returns once every rank has entered it.
func (t *transport) exchange(w *waiter, v [exchWords]int64) ([][exchWords]int64, error) {
	t.exch++
	cnt := t.exch
	word := func(r, i int) *int64 {
		off := t.seg.Ctl(r) + cExch + 8*(int(cnt%2)*exchWords+i)
		return (*int64)(unsafe.Pointer(&t.seg.Mem[off]))
	}
	hdr := func(r int) *uint32 { return t.seg.U32(t.seg.Ctl(r) + cExchHdr + int(cnt%2)*hdrStride) }
	for i, x := range v {
		atomic.StoreInt64(word(t.rank, i), x)
	}
	sg.SetHeader(hdr(t.rank), w.hdr)
	sg.Set(t.seg.barFlag(t.rank), uint32(cnt))
	out := make([][exchWords]int64, t.n)
	for j := 0; j < t.n; j++ {
		if err := w.wait(t.seg.barFlag(j), uint32(cnt), j, "the other ranks to arrive"); err != nil {
			return nil, err
		}
		if err := w.check(hdr(j), j); err != nil {
			return nil, err
		}
		for i := range out[j] {
			out[j][i] = atomic.LoadInt64(word(j, i))
		}
	}
	return out, nil
}

// directMin is the size from which collectives check whether every
// rank's buffers are in the shared heap (costs one exchange).
const directMin = 64 << 10

// offsetIn returns b's offset in the segment if it lies in this rank's
// heap (0 for an empty slice), else -1.
func (t *transport) offsetIn(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	h := t.seg.Heap(t.rank)
	if len(h) == 0 {
		return -1
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	if p < lo || p+uintptr(len(b)) > lo+uintptr(len(h)) {
		return -1
	}
	return int64(t.seg.L.HeapOff+t.rank*t.seg.L.Heap) + int64(p-lo)
}

// view returns rank r's published buffer, or false if it is not inside
// r's heap.
func (t *transport) view(r int, off, n int64) ([]byte, bool) {
	if n == 0 {
		return nil, off == 0
	}
	lo := int64(t.seg.L.HeapOff + r*t.seg.L.Heap)
	if off < lo || n < 0 || off+n > lo+int64(t.seg.L.Heap) {
		return nil, false
	}
	return t.seg.Mem[off : off+n : off+n], true
}

// tryDirect runs c without staging copies when every rank's buffers are
// in the shared heap: after an exchange of buffer offsets each rank does
// its share reading and writing the others' buffers (package direct),
// then a barrier keeps everyone until all writes are done. It reports
// whether it handled c.
func (t *transport) tryDirect(w *waiter, c *comm.Call) (bool, error) {
	switch c.Op {
	case comm.OpAllReduce, comm.OpBroadcast, comm.OpAllGather, comm.OpAllGatherV, comm.OpAllToAll, comm.OpReduceScatter:
	default:
		return false, nil
	}
	// Every rank decides alike: the heap size is in the shared header and
	// len(Recv) is the same on every rank for these operations.
	if t.seg.L.Heap == 0 || len(c.Recv) < directMin {
		return false, nil
	}
	so, ro := t.offsetIn(c.Send), t.offsetIn(c.Recv)
	all, err := t.exchange(w, [exchWords]int64{so, int64(len(c.Send)), ro, int64(len(c.Recv))})
	if err != nil {
		return true, err
	}
	// The exchange's headers matched (same operation, dtype and Count);
	// the whole results must match too.
	for j, v := range all {
		if v[3] != int64(len(c.Recv)) {
			return true, &comm.MismatchError{Seq: c.Seq, Diff: fmt.Sprintf("rank %d receives %d elements in %v, rank %d receives %d",
				j, v[3]/int64(c.ElemSize()), comm.DescOf(c), t.rank, len(c.Recv)/c.ElemSize())}
		}
	}
	calls := make([]*comm.Call, t.n)
	for j, v := range all {
		send, ok1 := t.view(j, v[0], v[1])
		recv, ok2 := t.view(j, v[2], v[3])
		if !ok1 || !ok2 {
			return false, nil // some rank's buffers are not shared: stage through slots
		}
		cj := *c
		cj.Send, cj.Recv = send, recv
		calls[j] = &cj
	}
	calls[t.rank] = c
	if err := direct.Agree(calls); err != nil {
		return true, err
	}
	direct.Work(t.rank, calls)
	_, err = t.exchange(w, [exchWords]int64{})
	return true, err
}

// Alloc and Free implement comm.Allocator on this rank's heap.
func (t *transport) Alloc(n int) ([]byte, error) { return t.heap.alloc(n) }
func (t *transport) Free(b []byte) error         { return t.heap.release(b) }

// chunkBytes picks the chunk size for b bytes: about 2 chunks per rank,
// at least minChunk, at most a slot, a multiple of 64.
func (t *transport) chunkBytes(b int) int {
	c := (b + 2*t.n - 1) / (2 * t.n)
	c = sg.AlignUp(max(c, minChunk), 64)
	return min(c, t.slot)
}

// slotOf returns the slot and use count of chunk i of the current op.
func (t *transport) slotOf(i int) (int, uint32) {
	q := t.q + uint64(i)
	return int(q % uint64(t.k)), uint32(q / uint64(t.k))
}

// --- all-reduce ---

type reduceJob struct {
	w      *waiter
	c      *comm.Call
	cb, nq int // chunk bytes, chunk count
}

func (t *transport) allReduce(w *waiter, c *comm.Call) error {
	b := len(c.Recv)
	cb := t.chunkBytes(b)
	nq := max(1, (b+cb-1)/cb) // an empty call streams one empty chunk, so that its header is checked
	defer func() { t.q += uint64(nq) }()
	job := reduceJob{w: w, c: c, cb: cb, nq: nq}
	if t.inline || nq <= t.n {
		// Windows of K chunks: copy in, reduce own, copy out. No slot is
		// reused within a window, so no rank can wait on a later phase.
		for w0 := 0; w0 < nq; w0 += t.k {
			w1 := min(w0+t.k, nq)
			for i := w0; i < w1; i++ {
				if i%t.n != t.rank {
					if err := t.copyIn(job, i); err != nil {
						return err
					}
				}
			}
			for i := w0 + mod(t.rank-w0, t.n); i < w1; i += t.n {
				if err := t.reduceChunk(job, i); err != nil {
					return err
				}
			}
			for i := w0; i < w1; i++ {
				if i%t.n != t.rank {
					if err := t.copyOut(job, i); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	// The persistent reducer reduces this rank's chunks while this
	// goroutine copies the others' in and out, copy-outs trailing copy-ins
	// by at most K chunks (a copy-in of chunk i needs slot i mod K, freed
	// once every rank is done with chunk i-K).
	t.jobs <- job
	err := func() error {
		next := t.nextForeign(0)
		for i := t.nextForeign(0); i < nq; i = t.nextForeign(i + 1) {
			for next <= i-t.k {
				if err := t.copyOut(job, next); err != nil {
					return err
				}
				next = t.nextForeign(next + 1)
			}
			if err := t.copyIn(job, i); err != nil {
				return err
			}
			for next < i && t.resultReady(next) {
				if err := t.copyOut(job, next); err != nil {
					return err
				}
				next = t.nextForeign(next + 1)
			}
		}
		for ; next < nq; next = t.nextForeign(next + 1) {
			if err := t.copyOut(job, next); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		t.failed.Store(true) // stop the reducer if it waits on this rank
		t.wakeAll()
	}
	rerr := <-t.done
	t.failed.Store(false)
	if err == nil || (errors.Is(err, errReducer) && rerr != nil) {
		err = rerr
	}
	return err
}

func mod(a, n int) int { return ((a % n) + n) % n }

// nextForeign is the first chunk >= i that another rank owns.
func (t *transport) nextForeign(i int) int {
	if i%t.n == t.rank {
		i++
	}
	return i
}

func (t *transport) resultReady(i int) bool {
	s, u := t.slotOf(i)
	return sg.Reached(atomic.LoadUint32(t.seg.resFlag(s)), u+1)
}

func (j reduceJob) chunk(i int) (lo, hi int) {
	lo = i * j.cb
	return lo, min(lo+j.cb, len(j.c.Recv))
}

func (t *transport) copyIn(j reduceJob, i int) error {
	s, u := t.slotOf(i)
	if err := j.w.slotFree(s, u); err != nil {
		return err
	}
	lo, hi := j.chunk(i)
	copy(t.seg.InSlot(t.rank, s), j.c.Recv[lo:hi])
	j.w.publish(t.seg.inFlag(t.rank, s), u+1)
	return nil
}

func (t *transport) copyOut(j reduceJob, i int) error {
	s, u := t.slotOf(i)
	owner := i % t.n
	if err := j.w.waitData(t.seg.resFlag(s), u+1, owner, "a reduced chunk"); err != nil {
		return err
	}
	lo, hi := j.chunk(i)
	copy(j.c.Recv[lo:hi], t.seg.ResSlot(s))
	sg.Set(t.seg.outFlag(t.rank, s), u+1)
	return nil
}

// subBlock keeps a reduction's working set in cache.
const subBlock = 32 << 10

// reduceChunk adds chunk i of every rank in rank order into the result
// slot and this rank's buffer.
func (t *transport) reduceChunk(j reduceJob, i int) error {
	s, u := t.slotOf(i)
	w := j.w
	for r := 0; r < t.n; r++ {
		if r != t.rank {
			if err := w.waitData(t.seg.inFlag(r, s), u+1, r, "its share of a chunk"); err != nil {
				return err
			}
		}
	}
	if err := w.slotFree(s, u); err != nil {
		return err
	}
	lo, hi := j.chunk(i)
	mine := j.c.Recv[lo:hi]
	res := t.seg.ResSlot(s)[:hi-lo]
	t.reduceInto(j.c, res, mine, func(r int) []byte { return t.seg.InSlot(r, s) }, mine)
	w.publish(t.seg.resFlag(s), u+1)
	sg.Set(t.seg.outFlag(t.rank, s), u+1)
	return nil
}

// reduceInto computes out = x_0 op x_1 op ... op x_{n-1} (rank order),
// where x_r is own for this rank and other(r)[:len] otherwise, finishes
// Mean, and copies the result to also (if not nil), block by block.
func (t *transport) reduceInto(c *comm.Call, out, own []byte, other func(r int) []byte, also []byte) {
	es := c.ElemSize()
	blk := subBlock / es * es
	for a := 0; a < len(out); a += blk {
		b := min(a+blk, len(out))
		x := func(r int) []byte {
			if r == t.rank {
				return own[a:b]
			}
			return other(r)[a:b]
		}
		reduce.Into3(c.DType, c.Red, out[a:b], x(0), x(1))
		for r := 2; r < t.n; r++ {
			reduce.Into(c.DType, c.Red, out[a:b], x(r))
		}
		reduce.Finish(c.DType, c.Red, out[a:b], t.n)
		if also != nil {
			copy(also[a:b], out[a:b])
		}
	}
}

// reducer is the persistent goroutine that reduces this rank's chunks.
func (t *transport) reducer() {
	for j := range t.jobs {
		var err error
		for i := t.rank; i < j.nq; i += t.n {
			if err = t.reduceChunk(j, i); err != nil {
				t.failed.Store(true)
				t.wakeAll()
				break
			}
		}
		t.done <- err
	}
	close(t.done)
}

// --- broadcast ---

func (t *transport) broadcast(w *waiter, c *comm.Call) error {
	b := len(c.Recv)
	cb := t.chunkBytes(b)
	nq := max(1, (b+cb-1)/cb)
	defer func() { t.q += uint64(nq) }()
	root := c.Root
	for i := 0; i < nq; i++ {
		s, u := t.slotOf(i)
		lo, hi := i*cb, min((i+1)*cb, b)
		if t.rank == root {
			if err := w.slotFree(s, u); err != nil {
				return err
			}
			copy(t.seg.InSlot(root, s), c.Recv[lo:hi])
			w.publish(t.seg.inFlag(root, s), u+1)
		} else {
			if err := w.waitData(t.seg.inFlag(root, s), u+1, root, "broadcast data"); err != nil {
				return err
			}
			copy(c.Recv[lo:hi], t.seg.InSlot(root, s))
		}
		sg.Set(t.seg.outFlag(t.rank, s), u+1)
	}
	return nil
}

// piece returns bytes [i*p, (i+1)*p) of b clipped to len(b).
func piece(b []byte, i, p int) []byte {
	lo := min(i*p, len(b))
	return b[lo:min(lo+p, len(b))]
}

// --- all-gather ---

func (t *transport) allGather(w *waiter, c *comm.Call) error {
	es := c.ElemSize()
	block := func(r int) []byte {
		return c.Recv[c.RecvDispls[r]*es : (c.RecvDispls[r]+c.RecvCounts[r])*es]
	}
	copy(block(t.rank), c.Send)
	maxb := 0
	for _, k := range c.RecvCounts {
		maxb = max(maxb, k*es)
	}
	cb := t.chunkBytes(maxb)
	nq := max(1, (maxb+cb-1)/cb)
	defer func() { t.q += uint64(nq) }()
	mine := w.hdr
	mine.Block = int64(len(c.Send) / es)
	for i := 0; i < nq; i++ {
		s, u := t.slotOf(i)
		if err := w.slotFree(s, u); err != nil {
			return err
		}
		copy(t.seg.InSlot(t.rank, s), piece(c.Send, i, cb))
		sg.SetHeader(t.seg.inFlag(t.rank, s), mine)
		sg.Set(t.seg.inFlag(t.rank, s), u+1)
		for r := 0; r < t.n; r++ {
			if r == t.rank {
				continue
			}
			if err := w.waitData(t.seg.inFlag(r, s), u+1, r, "all-gather data"); err != nil {
				return err
			}
			if got := sg.GetHeader(t.seg.inFlag(r, s)).Block; got != int64(c.RecvCounts[r]) {
				return comm.BlockMismatch(w.hdr.Desc, t.rank, r, got, int64(c.RecvCounts[r]))
			}
			copy(piece(block(r), i, cb), t.seg.InSlot(r, s))
		}
		sg.Set(t.seg.outFlag(t.rank, s), u+1)
	}
	return nil
}

// subPiece is the share of a slot for one destination rank.
func (t *transport) subPiece() int { return max(64, t.slot/t.n/64*64) }

// --- all-to-all ---

func (t *transport) allToAll(w *waiter, c *comm.Call) error {
	es := c.ElemSize()
	sendB := func(d int) []byte {
		return c.Send[c.SendDispls[d]*es : (c.SendDispls[d]+c.SendCounts[d])*es]
	}
	recvB := func(s int) []byte {
		return c.Recv[c.RecvDispls[s]*es : (c.RecvDispls[s]+c.RecvCounts[s])*es]
	}
	copy(recvB(t.rank), sendB(t.rank))
	maxb := 0
	for r := 0; r < t.n; r++ {
		if r != t.rank {
			maxb = max(maxb, c.SendCounts[r]*es, c.RecvCounts[r]*es)
		}
	}
	if c.Op == comm.OpAllToAllV {
		// Every rank must stream the same number of chunks: agree on the
		// largest block anywhere.
		all, err := t.exchange(w, [exchWords]int64{int64(maxb)})
		if err != nil {
			return err
		}
		for _, a := range all {
			maxb = max(maxb, int(a[0]))
		}
	}
	p := t.subPiece()
	nq := max(1, (maxb+p-1)/p)
	defer func() { t.q += uint64(nq) }()
	for i := 0; i < nq; i++ {
		s, u := t.slotOf(i)
		if err := w.slotFree(s, u); err != nil {
			return err
		}
		in := t.seg.InSlot(t.rank, s)
		for d := 0; d < t.n; d++ {
			if d != t.rank {
				copy(in[d*p:], piece(sendB(d), i, p))
			}
		}
		w.publish(t.seg.inFlag(t.rank, s), u+1)
		for r := 0; r < t.n; r++ {
			if r == t.rank {
				continue
			}
			if err := w.waitData(t.seg.inFlag(r, s), u+1, r, "all-to-all data"); err != nil {
				return err
			}
			copy(piece(recvB(r), i, p), t.seg.InSlot(r, s)[t.rank*p:])
		}
		sg.Set(t.seg.outFlag(t.rank, s), u+1)
	}
	return nil
}

// --- reduce-scatter ---

func (t *transport) reduceScatter(w *waiter, c *comm.Call) error {
	blk := len(c.Recv)
	src := func(b int) []byte { return c.Send[b*blk : (b+1)*blk] }
	p := t.subPiece()
	nq := max(1, (blk+p-1)/p)
	defer func() { t.q += uint64(nq) }()
	for i := 0; i < nq; i++ {
		s, u := t.slotOf(i)
		if err := w.slotFree(s, u); err != nil {
			return err
		}
		in := t.seg.InSlot(t.rank, s)
		for b := 0; b < t.n; b++ {
			if b != t.rank {
				copy(in[b*p:], piece(src(b), i, p))
			}
		}
		w.publish(t.seg.inFlag(t.rank, s), u+1)
		for r := 0; r < t.n; r++ {
			if r != t.rank {
				if err := w.waitData(t.seg.inFlag(r, s), u+1, r, "reduce-scatter data"); err != nil {
					return err
				}
			}
		}
		out := piece(c.Recv, i, p)
		own := piece(src(t.rank), i, p)
		t.reduceInto(c, out, own, func(r int) []byte { return t.seg.InSlot(r, s)[t.rank*p:] }, nil)
		sg.Set(t.seg.outFlag(t.rank, s), u+1)
	}
	return nil
}
