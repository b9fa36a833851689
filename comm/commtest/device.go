package commtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// The device suites check comm.DeviceComm back ends (NCCL, GPU shared
// memory, staged) with the cases of the host suites on buffers of a
// compute back end. They are written per rank, so that one process per
// GPU can run them (RunDevice* in each process), and RunLocalRanks runs
// them on goroutine ranks in one process.

// DeviceOpener opens this rank's communicator of a new group with
// front-end options o. Every rank calls it the same number of times, in
// step (it is collective).
type DeviceOpener func(o comm.Options) (comm.DeviceComm, error)

// DeviceEnv is what the per-rank device suites need.
type DeviceEnv struct {
	Rank, Size int
	// Backend holds the buffers (the rank's GPU, or the CPU back end).
	Backend backend.Backend
	// Open opens a new group (collective).
	Open DeviceOpener
	// Barrier synchronizes the ranks outside any communicator (the
	// rendezvous store's barrier, or a goroutine barrier), with a name
	// for error messages.
	Barrier func(name string) error
	// Exact says float sums are computed in rank order (bit-identical to
	// a sequential float32 sum); otherwise they are checked within a
	// rounding tolerance.
	Exact bool
	// Logf, if set, receives progress lines.
	Logf func(format string, a ...any)
	// UncheckedCounts, if not empty, says why the back end cannot refuse
	// ranks that pass different element counts (it sends no header with
	// its data: NCCL, gpushm's device path); DeviceFaults then skips that
	// scenario and logs the reason.
	UncheckedCounts string
}

func (e DeviceEnv) logf(format string, a ...any) {
	if e.Logf != nil {
		e.Logf(format, a...)
	}
}

// sizeCaps lets the host checks (which ask a comm.Comm for Size and Caps)
// judge device results. Only Size and Caps are called.
type sizeCaps struct {
	comm.Comm
	n    int
	caps comm.Caps
}

func (s sizeCaps) Size() int       { return s.n }
func (s sizeCaps) Caps() comm.Caps { return s.caps }

// devBufs allocates and frees the device buffers of one case.
type devBufs struct {
	be   backend.Backend
	bufs []backend.Buffer
}

func (d *devBufs) upload(h host) (backend.Buffer, error) {
	b, err := d.be.Alloc(h.dt, h.len())
	if err != nil {
		return nil, err
	}
	d.bufs = append(d.bufs, b)
	if h.len() > 0 {
		if err := d.be.Upload(b, hostAny(h)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (d *devBufs) download(h host, b backend.Buffer) error {
	if h.len() == 0 {
		return nil
	}
	return d.be.Download(hostAny(h), b)
}

func (d *devBufs) free() {
	for _, b := range d.bufs {
		d.be.Free(b)
	}
	d.bufs = nil
}

func hostAny(h host) any {
	switch h.dt {
	case backend.Float32:
		return h.f32
	case backend.Int32:
		return h.i32
	}
	return h.i64
}

// RunDeviceCase runs c on this rank with buffers of be and checks the
// result (every rank calls it with the same Case).
func RunDeviceCase(ctx context.Context, dc comm.DeviceComm, be backend.Backend, exact bool, c Case) error {
	n, r := dc.Size(), dc.Rank()
	d := &devBufs{be: be}
	defer d.free()
	fail := func(err error) error { return fmt.Errorf("rank %d: %v: %w", r, c, err) }
	cm := sizeCaps{n: n, caps: comm.Caps{RankOrderSum: exact}}
	var out host
	var check func() error
	var err error
	switch c.Op {
	case comm.OpAllReduce:
		h := newHost(c.DType, c.Len)
		fill(h, c.Seed, r, 0)
		b, e := d.upload(h)
		if e != nil {
			return fail(e)
		}
		if err = dc.AllReduce(ctx, b, c.Red); err == nil {
			h.poison()
			err = d.download(h, b)
		}
		check = func() error { return checkReduced(cm, c, h, 0) }
		out = h
	case comm.OpReduceScatter:
		src := newHost(c.DType, n*c.Len)
		fill(src, c.Seed, r, 0)
		dst := newHost(c.DType, c.Len)
		dst.poison()
		bs, e := d.upload(src)
		if e != nil {
			return fail(e)
		}
		bd, e := d.upload(dst)
		if e != nil {
			return fail(e)
		}
		if err = dc.ReduceScatter(ctx, bd, bs, c.Red); err == nil {
			src.poison()
			if err = d.download(dst, bd); err == nil {
				err = d.download(src, bs)
			}
		}
		check = func() error {
			if e := checkReduced(cm, c, dst, r*c.Len); e != nil {
				return e
			}
			return checkUnchanged(c, src, r)
		}
	case comm.OpBroadcast:
		root := int(c.Seed % uint64(n))
		h := newHost(c.DType, c.Len)
		if r == root {
			fill(h, c.Seed, root, 0)
		} else {
			h.poison()
		}
		b, e := d.upload(h)
		if e != nil {
			return fail(e)
		}
		if err = dc.Broadcast(ctx, b, root); err == nil {
			h.poison()
			err = d.download(h, b)
		}
		check = func() error { return checkCopy(c, "buf", h, 0, c.Len, root, 0) }
	case comm.OpAllGather, comm.OpAllGatherV:
		counts := make([]int, n)
		total := 0
		for s := range counts {
			counts[s] = c.Len
			if c.Op == comm.OpAllGatherV {
				counts[s] = vcount(c.Seed, c.Len, s, -1)
			}
			total += counts[s]
		}
		src := newHost(c.DType, counts[r])
		fill(src, c.Seed, r, 0)
		dst := newHost(c.DType, total)
		dst.poison()
		bs, e := d.upload(src)
		if e != nil {
			return fail(e)
		}
		bd, e := d.upload(dst)
		if e != nil {
			return fail(e)
		}
		if c.Op == comm.OpAllGather {
			err = dc.AllGather(ctx, bd, bs)
		} else {
			err = dc.AllGatherV(ctx, bd, bs, counts)
		}
		if err == nil {
			src.poison()
			if err = d.download(dst, bd); err == nil {
				err = d.download(src, bs)
			}
		}
		check = func() error {
			off := 0
			for s, k := range counts {
				if e := checkCopy(c, "dst", dst, off, k, s, 0); e != nil {
					return e
				}
				off += k
			}
			return checkUnchanged(c, src, r)
		}
	case comm.OpAllToAll, comm.OpAllToAllV:
		send, recv := make([]int, n), make([]int, n)
		st, rt := 0, 0
		for p := range send {
			send[p], recv[p] = c.Len, c.Len
			if c.Op == comm.OpAllToAllV {
				send[p], recv[p] = vcount(c.Seed, c.Len, r, p), vcount(c.Seed, c.Len, p, r)
			}
			st += send[p]
			rt += recv[p]
		}
		offsetIn := func(s, t int) int {
			o := 0
			for k := 0; k < t; k++ {
				if c.Op == comm.OpAllToAllV {
					o += vcount(c.Seed, c.Len, s, k)
				} else {
					o += c.Len
				}
			}
			return o
		}
		src := newHost(c.DType, st)
		fill(src, c.Seed, r, 0)
		dst := newHost(c.DType, rt)
		dst.poison()
		bs, e := d.upload(src)
		if e != nil {
			return fail(e)
		}
		bd, e := d.upload(dst)
		if e != nil {
			return fail(e)
		}
		if c.Op == comm.OpAllToAll {
			err = dc.AllToAll(ctx, bd, bs)
		} else {
			err = dc.AllToAllV(ctx, bd, recv, bs, send)
		}
		if err == nil {
			src.poison()
			if err = d.download(dst, bd); err == nil {
				err = d.download(src, bs)
			}
		}
		check = func() error {
			off := 0
			for s, k := range recv {
				if e := checkCopy(c, "dst", dst, off, k, s, offsetIn(s, r)); e != nil {
					return e
				}
				off += k
			}
			return checkUnchanged(c, src, r)
		}
	case comm.OpBarrier:
		err = dc.Barrier(ctx)
		check = func() error { return nil }
	default:
		return fmt.Errorf("commtest: unknown op %v", c.Op)
	}
	if err != nil {
		return fail(err)
	}
	bad := check()
	if out.dt != 0 {
		if e := sameOnDevices(ctx, dc, d, out); e != nil && bad == nil {
			bad = e
		}
	}
	if bad != nil {
		return fail(bad)
	}
	return nil
}

// sameOnDevices all-gathers a hash of h through the device communicator
// and checks that every rank holds the same result.
func sameOnDevices(ctx context.Context, dc comm.DeviceComm, d *devBufs, h host) error {
	n := dc.Size()
	mine := host{dt: backend.Int64, i64: []int64{h.hash()}}
	all := host{dt: backend.Int64, i64: make([]int64, n)}
	bm, err := d.upload(mine)
	if err != nil {
		return err
	}
	ba, err := d.upload(all)
	if err != nil {
		return err
	}
	if err := dc.AllGather(ctx, ba, bm); err != nil {
		return fmt.Errorf("exchanging result hashes: %w", err)
	}
	if err := d.download(all, ba); err != nil {
		return err
	}
	for s, x := range all.i64 {
		if x != all.i64[0] {
			return fmt.Errorf("rank %d's result differs from rank 0's (hash %x vs %x)", s, x, all.i64[0])
		}
	}
	return nil
}

// RunDeviceProgram runs every case of Cases for each length (seeds
// derived from seed) on this rank.
func RunDeviceProgram(ctx context.Context, dc comm.DeviceComm, be backend.Backend, exact bool, lens []int, seed uint64) error {
	for i, l := range lens {
		for _, c := range Cases(l, seed+uint64(i)) {
			if err := RunDeviceCase(ctx, dc, be, exact, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeviceLens are the per-rank lengths of the device conformance suite:
// the host suite's, plus lengths that span many chunks of the GPU
// shared-memory pipeline.
func DeviceLens() []int {
	if !flag.Parsed() { // a child process of a multi-process test
		return []int{0, 1, 2, 3, 7, 8, 13, 31, 64, 100, 257, 1000, 4097, 20011, 65537, 1<<20 + 3}
	}
	return append(Lens(), 1<<20+3)
}

// deviceFaultTimeout is FaultTimeout, also in child processes (whose
// test flags are not parsed).
func deviceFaultTimeout() time.Duration {
	if !flag.Parsed() {
		return time.Second
	}
	return FaultTimeout()
}

// DeviceConformance runs the conformance suite on this rank: every case
// for each of lens, then barrier ordering (a delayed rank holds the others
// back) and sequence numbering.
func DeviceConformance(ctx context.Context, e DeviceEnv, lens []int) error {
	dc, err := e.Open(comm.Options{Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer dc.Close()
	start := time.Now()
	if err := RunDeviceProgram(ctx, dc, e.Backend, e.Exact, lens, 77); err != nil {
		return err
	}
	e.logf("rank %d: %d lengths x %d cases in %v", e.Rank, len(lens), len(Cases(0, 0)), time.Since(start).Round(time.Millisecond))
	// Barrier: rank (round+1)%n arrives 60 ms late; the others must wait.
	for round := 0; round < 2; round++ {
		if err := dc.Barrier(ctx); err != nil {
			return err
		}
		late := (round + 1) % e.Size
		t0 := time.Now()
		if e.Rank == late {
			time.Sleep(60 * time.Millisecond)
		}
		if err := dc.Barrier(ctx); err != nil {
			return err
		}
		if el := time.Since(t0); el < 40*time.Millisecond {
			return fmt.Errorf("rank %d left the barrier after %v; rank %d arrived 60 ms late", e.Rank, el, late)
		}
	}
	// History: an all-reduce and a barrier get consecutive numbers.
	h := comm.HistoryOf(dc)
	var before uint64
	if len(h) > 0 {
		before = h[len(h)-1].Seq
	}
	d := &devBufs{be: e.Backend}
	defer d.free()
	b, err := d.upload(host{dt: backend.Float32, f32: []float32{float32(e.Rank)}})
	if err != nil {
		return err
	}
	if err := dc.AllReduce(ctx, b, comm.Sum); err != nil {
		return err
	}
	if err := dc.Barrier(ctx); err != nil {
		return err
	}
	if err := dc.Sync(ctx); err != nil {
		return err
	}
	h = comm.HistoryOf(dc)
	if len(h) < 2 {
		return fmt.Errorf("rank %d: history has %d records", e.Rank, len(h))
	}
	a, z := h[len(h)-2], h[len(h)-1]
	if a.Op != comm.OpAllReduce || z.Op != comm.OpBarrier || a.Seq != before+1 || z.Seq != before+2 || a.Err != "" || a.Count != 1 {
		return fmt.Errorf("rank %d: last records %+v, %+v; previous seq %d", e.Rank, a, z, before)
	}
	got := host{dt: backend.Float32, f32: make([]float32, 1)}
	if err := d.download(got, b); err != nil {
		return err
	}
	if want := float32(e.Size * (e.Size - 1) / 2); got.f32[0] != want {
		return fmt.Errorf("rank %d: sum of ranks = %v, want %v", e.Rank, got.f32[0], want)
	}
	return nil
}

// RunLocalRanks runs f for ranks 0..n-1 on goroutines and joins their
// errors.
func RunLocalRanks(n int, f func(rank int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// LocalOpeners turns a function that opens a whole group at once (for
// goroutine ranks) into per-rank openers: the k-th call of every rank
// gets its member of the k-th group.
func LocalOpeners(n int, open func(o comm.Options) ([]comm.DeviceComm, error)) []DeviceOpener {
	var mu sync.Mutex
	type grp struct {
		comms []comm.DeviceComm
		err   error
		done  chan struct{}
	}
	var groups []*grp
	calls := make([]int, n)
	ops := make([]DeviceOpener, n)
	for r := range ops {
		ops[r] = func(o comm.Options) (comm.DeviceComm, error) {
			mu.Lock()
			k := calls[r]
			calls[r]++
			for len(groups) <= k {
				groups = append(groups, nil)
			}
			g := groups[k]
			if g == nil {
				g = &grp{done: make(chan struct{})}
				groups[k] = g
				mu.Unlock()
				g.comms, g.err = open(o)
				close(g.done)
			} else {
				mu.Unlock()
				<-g.done
			}
			if g.err != nil {
				return nil, g.err
			}
			return g.comms[r], nil
		}
	}
	return ops
}

// LocalBarrier returns a reusable barrier for n goroutine ranks. All
// ranks must use the same name; a rank that waits more than two minutes
// gives up with an error.
func LocalBarrier(n int) func(name string) error {
	var mu sync.Mutex
	count, gen := 0, 0
	genName := ""
	release := make(chan struct{})
	return func(name string) error {
		mu.Lock()
		if count == 0 {
			genName = name
		} else if name != genName {
			mu.Unlock()
			return fmt.Errorf("barrier %q: another rank waits at barrier %q", name, genName)
		}
		count++
		if count == n {
			count, gen = 0, gen+1
			close(release)
			release = make(chan struct{})
			mu.Unlock()
			return nil
		}
		ch := release
		mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("barrier %q: the other ranks did not arrive within 2 minutes", name)
		}
	}
}
