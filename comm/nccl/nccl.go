package nccl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/internal/nap"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/comm/staged"
	"github.com/strata-gnn/strata/internal/cudacomm"
	lib "github.com/strata-gnn/strata/internal/nccl"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Options configure an NCCL communicator.
type Options struct {
	comm.Options
	// Prefix namespaces the store keys ("nccl" if empty); every
	// communicator of a job needs its own.
	Prefix string
	// Async lets every operation but Barrier return once it is queued on the
	// device's stream, as NCCL's own calls do, instead of once it has
	// completed: later work on the stream is ordered after it (a Download
	// of the result waits for it), and the host goes on queueing while
	// the GPUs communicate. A watchdog polls the queued operations: past
	// an operation's deadline (or on a peer's abort) it publishes the
	// failure, aborts the communicator (which ends its kernels, so stream
	// waits return) and the next call reports it. Work on another stream
	// that reads a result must wait for this stream (an event). Pipelines
	// use it so that a gradient all-reduce leaves no gap on the GPU and a
	// stage's long exchange does not hold the launch order (DSP's
	// coordinator orders launches, not completions). The package reads no
	// environment variable: FromEnv applies STRATA_NCCL_ASYNC for
	// programs that honour it.
	Async bool
}

// EnvAsync is the environment variable FromEnv reads into Options.Async
// (a boolean: 1, t, true, 0, f, false, ...).
const EnvAsync = "STRATA_NCCL_ASYNC"

// FromEnv returns o with Async set from $STRATA_NCCL_ASYNC when that is
// set (it overrides o.Async either way), and whether it was. A value
// that is not a boolean is an error naming the variable.
func FromEnv(o Options) (Options, bool, error) {
	s := strings.TrimSpace(os.Getenv(EnvAsync))
	if s == "" {
		return o, false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return o, false, fmt.Errorf("nccl: %s=%q: want true or false", EnvAsync, s)
	}
	o.Async = v
	return o, true, nil
}

// AsyncFor reports whether a communicator opened with o runs operations
// asynchronously: o.Async.
func AsyncFor(o Options) bool { return o.Async }

// Timing of the slow path (store checks while a call waits).
const (
	slowAfter = 50 * time.Millisecond
	slowEvery = 50 * time.Millisecond
	storeWait = time.Second // bound on each store request of the slow path
	cleanWait = 10 * time.Second
)

// Available loads NCCL and reports why it cannot be used (nil if it can).
func Available() error { return lib.Load() }

// Open joins this rank's NCCL communicator over dev (a CUDA GPU's back
// end; its operations go on dev's stream) through the store: rank 0 makes
// the unique id and publishes it; every rank then calls ncclCommInitRank,
// bounded by ctx's deadline (else o.Timeout). When NCCL_NVLS_ENABLE is
// unset it is set to 0 (NVLink multicast off), and NCCL_RUNTIME_CONNECT
// to 0 (peers connected at initialization).
func Open(ctx context.Context, store rendezvous.Store, dev backend.Backend, o Options) (comm.Comm, error) {
	if store == nil || dev == nil {
		return nil, &OpenError{Rank: -1, Msg: "Open needs a store and a device"}
	}
	if !cudacomm.IsGPU(dev) {
		return nil, &OpenError{Rank: store.Rank(), Msg: dev.Name() + " is not a CUDA device"}
	}
	if err := lib.Load(); err != nil {
		return nil, err
	}
	if err := cudacomm.Load(); err != nil {
		return nil, err
	}
	if _, ok := os.LookupEnv("NCCL_NVLS_ENABLE"); !ok {
		os.Setenv("NCCL_NVLS_ENABLE", "0")
	}
	// Connect every peer when the communicator opens (within Open's
	// deadline), not inside a first operation whose deadline was meant
	// for the transfer, and while other communicators' kernels run.
	if _, ok := os.LookupEnv("NCCL_RUNTIME_CONNECT"); !ok {
		os.Setenv("NCCL_RUNTIME_CONNECT", "0")
	}
	if _, ok := ctx.Deadline(); !ok {
		to := o.Timeout
		if to <= 0 {
			to = comm.DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, to)
		defer cancel()
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = "nccl"
	}
	rank, n := store.Rank(), store.Size()
	t := &transport{dev: dev, store: store, prefix: prefix, rank: rank, n: n}
	var err error
	if t.gpu, err = cudacomm.Retain(dev); err != nil {
		return nil, err
	}
	fail := func(err error) (comm.Comm, error) {
		t.release()
		return nil, fmt.Errorf("nccl rank %d: %w", rank, err)
	}
	var id lib.UniqueID
	if rank == 0 {
		if err := t.bound(func() error { var e error; id, e = lib.GetUniqueID(); return e }); err != nil {
			return fail(err)
		}
		if err := store.Set(ctx, prefix+"/id", id[:]); err != nil {
			return fail(err)
		}
	} else {
		v, err := store.Get(ctx, prefix+"/id")
		if err != nil {
			return fail(fmt.Errorf("waiting for rank 0's NCCL unique id: %w", err))
		}
		if len(v) != lib.UniqueIDBytes {
			return fail(fmt.Errorf("rank 0 published a %d-byte unique id, want %d", len(v), lib.UniqueIDBytes))
		}
		copy(id[:], v)
	}
	if t.ev, err = t.gpu.NewEvent(); err != nil {
		return fail(err)
	}
	// ncclCommInitRank blocks until every rank has joined: run it aside
	// and give up at the deadline (the call is then left behind).
	type res struct {
		c   lib.Comm
		err error
	}
	done := make(chan res, 1)
	go func() {
		var r res
		r.err = t.bound(func() error { var e error; r.c, e = lib.CommInitRank(n, id, rank); return e })
		done <- r
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return fail(r.err)
		}
		t.comm = r.c
	case <-ctx.Done():
		return fail(fmt.Errorf("ncclCommInitRank: not every rank joined: %w", ctx.Err()))
	}
	if t.scratch, err = dev.Alloc(backend.Int32, 1); err != nil {
		t.bound(t.comm.Abort)
		t.comm = 0
		return fail(err)
	}
	if o.Async {
		t.async = true
		t.wake, t.wdStop, t.wdDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go t.watchdog()
	}
	return comm.NewDevice(t, o.Options), nil
}

// transport implements comm.DeviceTransport on an NCCL communicator.
type transport struct {
	dev     backend.Backend
	gpu     *cudacomm.GPU
	comm    lib.Comm
	ev      cudacomm.Event // completion of the latest operation queued
	scratch backend.Buffer // a barrier's all-reduce
	store   rendezvous.Store
	prefix  string
	rank, n int

	runMu    sync.Mutex // held by Run, Gather; Close waits for it
	lastDone uint64
	posted   uint64
	checked  time.Time // last look at the store

	// Asynchronous operations (Options.Async); guarded by runMu.
	async    bool
	pend     pending // queued operations not yet seen complete
	asyncErr error   // failure of an operation that had returned
	wake     chan struct{}
	wdStop   chan struct{}
	wdDone   chan struct{}

	dirty   atomic.Bool // an operation failed or was interrupted: its kernels may still run
	closing atomic.Bool
	aborted atomic.Bool
	freed   atomic.Bool // communicator destroyed or aborted
	commMu  sync.Mutex  // serializes ncclCommAbort and ncclCommDestroy
}

func (t *transport) Kind() string { return comm.KindNCCL }
func (t *transport) Rank() int    { return t.rank }
func (t *transport) Size() int    { return t.n }

// Caps: NCCL's reduction order depends on its algorithm (ring, tree),
// not on the ranks' order.
func (t *transport) Caps() comm.Caps { return comm.Caps{} }

// Backend is the GPU whose buffers the communicator takes.
func (t *transport) Backend() backend.Backend { return t.dev }

func (t *transport) Check(b backend.Buffer) error     { return staged.CheckBuffer(t.dev, b) }
func (t *transport) Overlap(a, b backend.Buffer) bool { return backend.Overlap(a, b) }

// bound runs f on this goroutine's thread with the device's primary
// context current.
func (t *transport) bound(f func() error) error { return t.gpu.Bound(f) }

func (t *transport) key(parts ...any) string {
	k := t.prefix
	for _, p := range parts {
		k += "/" + fmt.Sprint(p)
	}
	return k
}

// ptr is the device address of element elems of b (a buffer of the
// device: Check accepted it).
func ptr(b backend.Buffer, elems int) lib.DevPtr {
	return lib.DevPtr(cudacomm.Addr(b) + uint64(elems*b.DType().Size()))
}

// copyElems queues a copy of k elements of src from element at into dst
// at element to.
func copyElems(q backend.Queue, dst backend.Buffer, to int, src backend.Buffer, at, k int) error {
	d, err := backend.View(dst, to, k)
	if err != nil {
		return err
	}
	s, err := backend.View(src, at, k)
	if err != nil {
		return err
	}
	return q.Copy(d, s)
}

func dtype(dt backend.DType) lib.DataType {
	switch dt {
	case backend.Int32:
		return lib.Int32
	case backend.Int64:
		return lib.Int64
	}
	return lib.Float32
}

func redop(r comm.ReduceOp) lib.RedOp {
	switch r {
	case comm.Mean:
		return lib.Avg
	case comm.Max:
		return lib.Max
	}
	return lib.Sum
}

// planLocal is plan for a group of one: every operation is the identity
// or a copy of the send buffer into the receive buffer, done with a device
// copy (NCCL's one-rank mean left the last element of an odd-length
// reduce-scatter unwritten in 2.28.3).
func planLocal(c *comm.DeviceCall) step {
	switch c.Op {
	case comm.OpAllGather, comm.OpAllGatherV, comm.OpAllToAll, comm.OpAllToAllV, comm.OpReduceScatter:
		if n := c.Recv.Len(); n > 0 {
			return func(q backend.Queue, _ lib.Stream) error { return copyElems(q, c.Recv, 0, c.Send, 0, n) }
		}
	}
	return nil
}

// step queues an operation's work on the device's queue q, whose stream
// is s.
type step func(q backend.Queue, s lib.Stream) error

// plan returns what to queue for c (nil: nothing to do).
func (t *transport) plan(c *comm.DeviceCall) step {
	if t.n == 1 {
		return planLocal(c)
	}
	dt, cm := dtype(c.DType), t.comm
	switch c.Op {
	case comm.OpBarrier:
		return func(_ backend.Queue, s lib.Stream) error {
			p := ptr(t.scratch, 0)
			return lib.AllReduce(p, p, 1, lib.Int32, lib.Sum, cm, s)
		}
	case comm.OpAllReduce:
		if c.Recv.Len() == 0 {
			return nil
		}
		return func(_ backend.Queue, s lib.Stream) error {
			p := ptr(c.Recv, 0)
			return lib.AllReduce(p, p, c.Recv.Len(), dt, redop(c.Red), cm, s)
		}
	case comm.OpBroadcast:
		if c.Recv.Len() == 0 {
			return nil
		}
		return func(_ backend.Queue, s lib.Stream) error {
			p := ptr(c.Recv, 0)
			return lib.Broadcast(p, p, c.Recv.Len(), dt, c.Root, cm, s)
		}
	case comm.OpAllGather:
		if c.Send.Len() == 0 {
			return nil
		}
		return func(_ backend.Queue, s lib.Stream) error {
			return lib.AllGather(ptr(c.Send, 0), ptr(c.Recv, 0), c.Send.Len(), dt, cm, s)
		}
	case comm.OpReduceScatter:
		if c.Recv.Len() == 0 {
			return nil
		}
		return func(_ backend.Queue, s lib.Stream) error {
			return lib.ReduceScatter(ptr(c.Send, 0), ptr(c.Recv, 0), c.Recv.Len(), dt, redop(c.Red), cm, s)
		}
	case comm.OpAllGatherV, comm.OpAllToAll, comm.OpAllToAllV:
		// Blocks: to rank p we send send(p) elements at sendAt(p) of Send,
		// from rank p we receive recv(p) at recvAt(p) of Recv.
		send := func(p int) (int, int) { return c.SendCounts[p], c.SendDispls[p] }
		if c.Op == comm.OpAllGatherV {
			send = func(int) (int, int) { return c.Send.Len(), 0 }
		}
		recv := func(p int) (int, int) { return c.RecvCounts[p], c.RecvDispls[p] }
		return func(q backend.Queue, s lib.Stream) error {
			if k, at := send(t.rank); k > 0 {
				_, to := recv(t.rank)
				if err := copyElems(q, c.Recv, to, c.Send, at, k); err != nil {
					return err
				}
			}
			if err := lib.GroupStart(); err != nil {
				return err
			}
			var first error
			for p := 0; p < t.n && first == nil; p++ {
				if p == t.rank {
					continue
				}
				if k, at := send(p); k > 0 {
					first = lib.Send(ptr(c.Send, at), k, dt, p, cm, s)
				}
				if k, at := recv(p); k > 0 && first == nil {
					first = lib.Recv(ptr(c.Recv, at), k, dt, p, cm, s)
				}
			}
			if err := lib.GroupEnd(); first == nil {
				first = err
			}
			return first
		}
	}
	return func(backend.Queue, lib.Stream) error { return fmt.Errorf("nccl: unsupported op %v", c.Op) }
}

// Run queues c on the device's stream and waits for it.
func (t *transport) Run(ctx context.Context, c *comm.DeviceCall) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.asyncErr != nil {
		// Before the closed check: the failure aborted the communicator.
		return t.asyncErr
	}
	if t.closing.Load() || t.freed.Load() {
		return comm.ErrClosed
	}
	if err := t.fresh(c.Seq); err != nil {
		return err
	}
	// A barrier's point is the wait: it stays synchronous.
	if t.async && t.n > 1 && c.Op != comm.OpBarrier {
		if err := t.queue(ctx, c.Op, c.Seq, t.plan(c)); err != nil {
			return err
		}
		t.pend.add(c.Op, c.Seq, c.Deadline)
		select {
		case t.wake <- struct{}{}:
		default:
		}
		t.lastDone = c.Seq
		return nil
	}
	// The completion event follows every earlier operation on the
	// stream, so this wait also completes the queued ones.
	if err := t.launch(ctx, c.Op, c.Seq, t.plan(c)); err != nil {
		return err
	}
	t.lastDone = c.Seq
	return nil
}

// launch queues f (plus the completion event) and waits for it.
func (t *transport) launch(ctx context.Context, op comm.Op, seq uint64, f step) error {
	if err := t.queue(ctx, op, seq, f); err != nil {
		return err
	}
	if err := t.wait(ctx, op, seq); err != nil {
		t.dirty.Store(true)
		return err
	}
	// The event followed every queued operation too.
	t.pend = pending{}
	return nil
}

// queue queues f and records the completion event after it.
func (t *transport) queue(ctx context.Context, op comm.Op, seq uint64, f step) error {
	// Queueing may block in NCCL (connection setup waits for the peers):
	// do it aside, bounded by the deadline; an abort releases it.
	done := make(chan error, 1)
	go func() {
		done <- t.gpu.Enqueue(func(q backend.Queue, s cudacomm.Stream) error {
			if f != nil {
				if err := f(q, lib.Stream(s)); err != nil {
					return err
				}
			}
			return t.ev.Record(s)
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.dirty.Store(true)
			return err
		}
	case <-ctx.Done():
		t.dirty.Store(true)
		return t.waitErr(ctx, op, seq, "queueing it (NCCL waits for the peers to connect)")
	}
	return nil
}

func (t *transport) waitErr(ctx context.Context, op comm.Op, seq uint64, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%v #%d: %s: %w", op, seq, what, ctx.Err())
	}
	return fmt.Errorf("%w: %v #%d: %s", ctx.Err(), op, seq, what)
}

// wait polls the completion event and NCCL's asynchronous error until the
// deadline, checking the store for aborts and departed ranks once the
// call is slow.
func (t *transport) wait(ctx context.Context, op comm.Op, seq uint64) error {
	unbind, err := t.gpu.Bind()
	defer unbind()
	if err != nil {
		return err
	}
	start := time.Now()
	var lastStore time.Time
	for {
		done, err := t.ev.Done()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := t.comm.AsyncError(); err != nil {
			return err
		}
		since := time.Since(start)
		switch {
		case since < spinFor:
			runtime.Gosched()
			continue
		case since < 20*time.Millisecond:
			nap.Sleep(20 * time.Microsecond) // time.Sleep would last ~1 ms
		default:
			nap.Sleep(200 * time.Microsecond)
		}
		if ctx.Err() != nil {
			return t.waitErr(ctx, op, seq, "waiting for NCCL to complete it")
		}
		if t.closing.Load() {
			return comm.ErrClosed
		}
		if since > slowAfter && time.Since(lastStore) > slowEvery {
			lastStore = time.Now()
			if err := t.slow(seq); err != nil {
				return err
			}
		}
	}
}

// spinFor is how long a wait spins (yielding) before it sleeps: long
// where cores are plentiful, short on small machines.
var spinFor = func() time.Duration {
	if runtime.NumCPU() >= 8 {
		return 500 * time.Microsecond
	}
	return 50 * time.Microsecond
}()

// abortInfo is what a failing rank publishes in the store.
type abortInfo struct {
	By      int    `json:"by"`
	Seq     uint64 `json:"seq"`
	Missing []int  `json:"missing"`
	Reason  string `json:"reason"`
}

func shortCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeWait)
}

// fresh checks the store for an abort or departed ranks before operation
// seq when the last check is older than slowEvery: a peer that gave up
// may have left this rank's NCCL operation able to complete on stale
// data, so the abort must be seen before the operation runs. At most one
// store round trip per slowEvery.
func (t *transport) fresh(seq uint64) error {
	if time.Since(t.checked) < slowEvery {
		return nil
	}
	ctx, cancel := shortCtx()
	defer cancel()
	return t.check(ctx, seq)
}

// slow posts this rank's sequence number and checks the store for an
// abort and for ranks that left before operation seq. Store failures are
// ignored (the deadline still bounds the wait).
func (t *transport) slow(seq uint64) error {
	ctx, cancel := shortCtx()
	defer cancel()
	if t.posted < seq {
		if _, err := t.store.Add(ctx, t.key("at", t.rank), int64(seq-t.posted)); err == nil {
			t.posted = seq
		}
	}
	return t.check(ctx, seq)
}

// check looks in the store for an abort and for ranks that left before
// operation seq.
func (t *transport) check(ctx context.Context, seq uint64) error {
	t.checked = time.Now()
	if v, err := t.store.Add(ctx, t.key("abort"), 0); err == nil && v > 0 {
		ae := &comm.AbortError{By: -1, Reason: "another rank aborted the NCCL communicator"}
		if b, err := t.store.Get(ctx, t.key("abort", "info")); err == nil {
			var ai abortInfo
			if json.Unmarshal(b, &ai) == nil {
				ae = &comm.AbortError{By: ai.By, Seq: ai.Seq, Missing: ai.Missing, Reason: ai.Reason}
			}
		}
		return ae
	}
	if v, err := t.store.Add(ctx, t.key("closed"), 0); err == nil && v > 0 {
		for r := 0; r < t.n; r++ {
			if r == t.rank {
				continue
			}
			if left, err := t.store.Add(ctx, t.key("left", r), 0); err == nil && left > 0 && uint64(left-1) < seq {
				return &comm.PeerError{Ranks: []int{r}, Err: comm.ErrPeerLost,
					Msg: fmt.Sprintf("rank %d closed its communicator after #%d", r, left-1)}
			}
		}
	}
	return nil
}

// Missing returns the ranks that have not posted operation seq to the
// store (a rank waiting on it posts within slowAfter) or left before it.
func (t *transport) Missing(ctx context.Context, seq uint64) []int {
	var m []int
	for r := 0; r < t.n; r++ {
		if r == t.rank {
			continue
		}
		at, err := t.store.Add(ctx, t.key("at", r), 0)
		if err != nil {
			continue
		}
		left, _ := t.store.Add(ctx, t.key("left", r), 0)
		if uint64(at) < seq || (left > 0 && uint64(left-1) < seq) {
			m = append(m, r)
		}
	}
	slices.Sort(m)
	return m
}

// Abort publishes the failure in the store and aborts the NCCL
// communicator, ending its kernels in flight.
func (t *transport) Abort(oe *comm.OpError) {
	if t.aborted.Swap(true) {
		return
	}
	ctx, cancel := shortCtx()
	defer cancel()
	var ae *comm.AbortError
	if !errors.As(oe, &ae) { // not already an abort by a peer: publish it
		info, _ := json.Marshal(abortInfo{By: t.rank, Seq: oe.Seq, Missing: oe.Missing, Reason: oe.Error()})
		if t.store.Set(ctx, t.key("abort", "info"), info) == nil {
			t.store.Add(ctx, t.key("abort"), 1)
		}
	}
	t.finish(true)
}

// finish aborts or destroys the communicator, once.
func (t *transport) finish(abort bool) error {
	t.commMu.Lock()
	defer t.commMu.Unlock()
	if t.comm == 0 || t.freed.Swap(true) {
		return nil
	}
	if abort {
		t.abortComm()
		return nil
	}
	return t.destroy()
}

// abortComm calls ncclCommAbort (bounded: a stuck call is left behind).
func (t *transport) abortComm() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.bound(t.comm.Abort)
	}()
	select {
	case <-done:
	case <-time.After(cleanWait):
		fmt.Fprintf(os.Stderr, "nccl rank %d: ncclCommAbort did not return within %v\n", t.rank, cleanWait)
	}
}

// Gather all-gathers words through NCCL (for the debug check).
func (t *transport) Gather(ctx context.Context, seq uint64, words []int64) ([]int64, error) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closing.Load() || t.freed.Load() {
		return nil, comm.ErrClosed
	}
	all := make([]int64, len(words)*t.n)
	src, err := t.dev.Alloc(backend.Int64, len(words))
	if err != nil {
		return nil, err
	}
	defer t.dev.Free(src)
	dst, err := t.dev.Alloc(backend.Int64, len(all))
	if err != nil {
		return nil, err
	}
	defer t.dev.Free(dst)
	if err := t.dev.Upload(src, words); err != nil {
		return nil, err
	}
	err = t.launch(ctx, comm.OpAllGather, seq, func(_ backend.Queue, s lib.Stream) error {
		return lib.AllGather(ptr(src, 0), ptr(dst, 0), len(words), lib.Int64, t.comm, s)
	})
	if err != nil {
		return nil, err
	}
	if err := t.dev.Download(all, dst); err != nil {
		return nil, err
	}
	return all, nil
}

// Sync waits for the queued asynchronous operations (reporting a failure
// of theirs), then for the device.
func (t *transport) Sync(ctx context.Context) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if err := t.joinPending(ctx); err != nil {
		return err
	}
	return t.dev.Synchronize()
}

// Close tells the peers (through the store) that this rank has left after
// its last completed operation, then destroys the communicator (aborts
// it when an operation was interrupted).
func (t *transport) Close() error {
	if t.closing.Swap(true) {
		return nil
	}
	if t.wdStop != nil {
		close(t.wdStop)
		<-t.wdDone
	}
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.pend.n > 0 {
		// Queued operations need the peers: let them finish (or fail)
		// before leaving, so that "left" says what this rank completed.
		ctx, cancel := context.WithTimeout(context.Background(), cleanWait)
		if t.joinPending(ctx) != nil {
			t.lastDone = t.pend.first - 1
		}
		cancel()
	}
	ctx, cancel := shortCtx()
	defer cancel()
	if _, err := t.store.Add(ctx, t.key("left", t.rank), int64(t.lastDone)+1); err == nil {
		t.store.Add(ctx, t.key("closed"), 1)
	}
	err := t.finish(t.aborted.Load() || t.dirty.Load())
	if t.scratch != nil {
		t.dev.Free(t.scratch)
	}
	if e := t.release(); err == nil {
		err = e
	}
	return err
}

// destroy calls ncclCommDestroy, bounded; a stuck call is aborted.
func (t *transport) destroy() error {
	done := make(chan error, 1)
	go func() { done <- t.bound(t.comm.Destroy) }()
	select {
	case err := <-done:
		return err
	case <-time.After(cleanWait):
		t.abortComm()
		return fmt.Errorf("nccl rank %d: ncclCommDestroy did not return within %v (aborted)", t.rank, cleanWait)
	}
}

// release frees the event and the context reference.
func (t *transport) release() error {
	return t.bound(func() error {
		err := t.ev.Destroy()
		t.ev = cudacomm.Event{}
		if e := t.gpu.Release(); err == nil {
			err = e
		}
		return err
	})
}

// OpenError reports arguments of Open or OpenLocal refused before NCCL
// is touched (Rank -1: not about one rank).
type OpenError struct {
	Rank int
	Msg  string
}

func (e *OpenError) Error() string { return fmt.Sprintf("nccl: open rank %d: %s", e.Rank, e.Msg) }

// OpenLocal opens one communicator per device in this process (goroutine
// ranks, rank r on devs[r], each a distinct CUDA GPU) through an
// in-memory store: what a single-process multi-GPU trainer uses. The
// ranks initialize concurrently, as ncclCommInitRank requires; if any
// fails, the others are closed and the first error is returned.
func OpenLocal(ctx context.Context, devs []backend.Backend, o Options) ([]comm.Comm, error) {
	n := len(devs)
	if n == 0 {
		return nil, &OpenError{Rank: -1, Msg: "OpenLocal needs at least one device"}
	}
	// One rank per GPU: NCCL refuses a GPU twice in a communicator only
	// once every rank is inside ncclCommInitRank; refuse it here (two
	// handles of one device are siblings).
	for r, d := range devs {
		if d == nil {
			return nil, &OpenError{Rank: r, Msg: "no device"}
		}
		for prev, p := range devs[:r] {
			if s, ok := p.(backend.Siblings); ok && s.SameDevice(d) {
				return nil, &OpenError{Rank: r, Msg: fmt.Sprintf("%s is rank %d's too", d.Name(), prev)}
			}
		}
	}
	for r, d := range devs {
		if !cudacomm.IsGPU(d) {
			return nil, &OpenError{Rank: r, Msg: d.Name() + " is not a CUDA device"}
		}
	}
	stores := rendezvous.NewLocal(n)
	out := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r], errs[r] = Open(ctx, stores[r], devs[r], o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return out, nil
}
