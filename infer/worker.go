package infer

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// worker computes one layer's chunks on one device.
type worker struct {
	r     *run
	d     int
	b     backend.Backend
	layer nn.Layered
	l     int
	input backend.Buffer // the layer's input matrix on the device, nil: gather on the host
	rin   *resLayer      // the layer's input kept on the devices (overrides input)
	hot   *hotRows       // with input nil: the input's most-read rows on the device
	rout  backend.Buffer // this device's rows of the layer's output kept on the devices
	exch  comm.Comm      // rin's exchange with the other devices (several devices)
	board *board         // the rounds' headers (with exch)
	round int            // the next round's number
	// rounds is the number of exchange rounds every device runs in
	// lockstep (rin on several devices), 0 otherwise.
	rounds int

	// stages hold chunks' source rows gathered on the host, used in
	// turn (stageN counts the uploads) so that one chunk's rows are
	// gathered while the previous chunk's upload runs.
	stages [2]stageSlot
	stageN int
	// async copies chunks' outputs to the host without waiting for them
	// (unless Options.SyncOutputs), through outs in turn; nil: each chunk's
	// Download waits.
	async backend.AsyncDownload
	outs  [2]outSlot
	outN  int
	// clk is the current chunk's (or empty round's) phase clock.
	clk phaseClock
}

// outSlot is pinned host memory a chunk's output rows are copied into on
// the device's queue; a goroutine copies them into the host output once
// fence is reached, while the device computes the next chunks.
type outSlot struct {
	hb    backend.HostBuffer
	fence backend.Fence
	done  chan error // the last copy-out's result, nil when none is pending
}

// wait waits for the slot's pending copy-out.
func (s *outSlot) wait() error {
	if s.done == nil {
		return nil
	}
	err := <-s.done
	s.done = nil
	return err
}

// startAsync turns on asynchronous outputs where the back end has them.
func (w *worker) startAsync() {
	ad, ok := w.b.(backend.AsyncDownload)
	_, fences := w.b.(backend.Fences)
	_, pinned := w.b.(backend.PinnedMemory)
	if ok && fences && pinned {
		w.async = ad
	}
}

// finishAsync waits for every pending copy-out and frees the slots and
// fences; it returns the first copy-out's error.
func (w *worker) finishAsync() error {
	var first error
	for i := range w.outs {
		s := &w.outs[i]
		if err := s.wait(); err != nil && first == nil {
			first = err
		}
		if s.hb != nil {
			s.hb.Free()
		}
		if s.fence != nil {
			s.fence.Close()
		}
		*s = outSlot{}
	}
	return first
}

// downloadAsync queues the copy of y (the chunk's output rows) into the
// next slot and returns; a goroutine writes them into out (writeRows)
// once the copy has run. The slot's previous copy-out is waited for
// first, so at most len(w.outs) chunks' outputs are in flight.
func (w *worker) downloadAsync(y backend.Buffer, out hostMatrix, dst []int32, row0 int) error {
	s := &w.outs[w.outN%len(w.outs)]
	w.outN++
	if err := s.wait(); err != nil {
		return err
	}
	n := len(dst) * out.width
	if s.hb == nil || len(s.hb.Float32s()) < n {
		if s.hb != nil {
			s.hb.Free()
			s.hb = nil
		}
		size := uint64(n+n/4) * 4 // a quarter more: chunk sizes vary
		hb, err := w.b.(backend.PinnedMemory).AllocPinned(size, false)
		if err != nil {
			return err
		}
		s.hb = hb
	}
	if s.fence == nil {
		f, err := w.b.(backend.Fences).NewFence()
		if err != nil {
			return err
		}
		s.fence = f
	}
	if err := w.async.DownloadAsync(s.hb, 0, y, uint64(n)*4); err != nil {
		return err
	}
	if err := s.fence.Record(); err != nil {
		return err
	}
	done := make(chan error, 1)
	s.done = done
	host, fence := s.hb.Float32s()[:n], s.fence
	go func() {
		err := fence.Wait()
		if err == nil {
			writeRows(out, host, dst, row0)
		}
		done <- err
	}()
	return nil
}

// writeRows writes a chunk's output rows (host, in dst's order) into
// out: rows row0.. when row0 >= 0, else rows dst[i].
func writeRows(out hostMatrix, host []float32, dst []int32, row0 int) {
	wd := out.width
	if row0 >= 0 {
		copy(out.data[row0*wd:(row0+len(dst))*wd], host)
		return
	}
	for i, v := range dst {
		copy(out.data[int(v)*wd:(int(v)+1)*wd], host[i*wd:(i+1)*wd])
	}
}

// stageSlot is staging memory for one chunk's gathered source rows,
// reused across the layer's chunks (no zeroing per chunk) and pinned where
// the back end has pinned memory, so that its upload runs at the link's
// rate; pin owns it then. An upload from pinned memory runs after Upload
// returns: done is reached when the slot's last upload has run.
type stageSlot struct {
	data []float32
	pin  backend.HostBuffer
	done backend.Fence
}

// free waits for the slot's last upload and frees its memory and fence.
func (s *stageSlot) free() error {
	var err error
	if s.done != nil {
		err = s.done.Wait()
		s.done.Close()
	}
	if s.pin != nil {
		s.pin.Free()
	}
	*s = stageSlot{}
	return err
}

// staging returns n floats of the next staging slot, growing it by a
// quarter more than asked when short, once that slot's last upload has
// run (the other slot's, the previous chunk's, may still run).
func (w *worker) staging(n int) ([]float32, error) {
	s := &w.stages[w.stageN%len(w.stages)]
	if s.done != nil {
		if err := s.done.Wait(); err != nil {
			return nil, err
		}
	}
	if cap(s.data) >= n {
		return s.data[:n], nil
	}
	if err := s.free(); err != nil {
		return nil, err
	}
	size := n + n/4
	if pm, ok := w.b.(backend.PinnedMemory); ok {
		if hb, err := pm.AllocPinned(uint64(size)*4, false); err == nil {
			s.pin, s.data = hb, hb.Float32s()[:size]
			return s.data[:n], nil
		}
	}
	s.data = make([]float32, size)
	return s.data[:n], nil
}

// staged marks the end of an upload from the slot staging returned (the
// next use of a pinned slot waits for it) and moves to the other slot.
// Pageable memory needs no fence: Upload returns once the driver has
// copied it.
func (w *worker) staged() error {
	s := &w.stages[w.stageN%len(w.stages)]
	w.stageN++
	fences, ok := w.b.(backend.Fences)
	if s.pin == nil || !ok {
		return nil
	}
	if s.done == nil {
		f, err := fences.NewFence()
		if err != nil {
			return err
		}
		s.done = f
	}
	return s.done.Record()
}

// freeStaging frees the staging slots once their uploads have run.
func (w *worker) freeStaging() error {
	var first error
	for i := range w.stages {
		if err := w.stages[i].free(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// gatherRows copies rows[src[i]] into dst's row i (width floats a row),
// split over workers goroutines: at papers scale a chunk gathers
// gigabytes, which one core copies far slower than the upload runs.
func gatherRows(dst, rows []float32, src []int32, width, workers int) {
	const minRows = 1 << 12
	parts := min(workers, (len(src)+minRows-1)/minRows)
	copyRange := func(a, b int) {
		for i := a; i < b; i++ {
			u := int(src[i])
			copy(dst[i*width:(i+1)*width], rows[u*width:(u+1)*width])
		}
	}
	if parts <= 1 {
		copyRange(0, len(src))
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		a, b := p*len(src)/parts, (p+1)*len(src)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			copyRange(a, b)
		}()
	}
	wg.Wait()
}

// prepared is a chunk made ready on the host ahead of its turn: its
// block and sources (nil when Options.Keep kept the chunk) and, when
// the layer's input is resident, its sources' route to their holders.
type prepared struct {
	hc  *hostChunk
	rt  *route
	err error
}

// workers is the goroutines a device's host work may take.
func (r *run) workers() int {
	if r.opts.Workers > 0 {
		return r.opts.Workers
	}
	return defaultWorkers(len(r.opts.Backends))
}

// defaultWorkers is a device's share of GOMAXPROCS among devices.
func defaultWorkers(devices int) int {
	return max(1, runtime.GOMAXPROCS(0)/max(devices, 1))
}

// maxBuilders caps the chunks a device builds at once: each builder
// holds a scratch of one word a node (888 MB at papers100M's size).
const maxBuilders = 4

// builders returns how many chunks a device builds at once and the
// goroutines each build takes.
func (r *run) builders() (n, each int) { return splitBuilders(r.workers()) }

// splitBuilders splits a device's workers into builders: one per
// minParallel workers, at most maxBuilders.
func splitBuilders(workers int) (n, each int) {
	n = max(1, min(maxBuilders, workers/minParallel))
	return n, max(1, workers/n)
}

// chunkDst lists the destinations of the device's chunk [a, b).
func (w *worker) chunkDst(a, b int) []int32 {
	nodes, lo, _, _ := w.r.nodesOf(w.l, w.d)
	dst := make([]int32, b-a)
	for i := range dst {
		if nodes != nil {
			dst[i] = nodes[a+i]
		} else {
			dst[i] = int32(lo + int64(a+i))
		}
	}
	return dst
}

func (w *worker) run(ctx context.Context, bounds []int, out hostMatrix, done *atomic.Int64) (err error) {
	r := w.r
	chunks := max(len(bounds)-1, 0)
	if chunks == 0 && w.rounds == 0 {
		return nil
	}
	if w.rout == nil && !r.opts.SyncOutputs {
		w.startAsync()
	}
	defer func() { // the outputs in flight are written before the worker returns
		if e := w.finishAsync(); err == nil && e != nil {
			err = &Error{Op: fmt.Sprintf("layer %d on %s, writing outputs", w.l+1, w.b.Name()), Err: e}
		}
	}()
	nb, each := r.builders()
	nb = max(1, min(nb, chunks))
	for len(r.scratch[w.d]) < nb {
		r.scratch[w.d] = append(r.scratch[w.d], newScratch(r.n))
	}
	defer func() {
		if e := w.freeStaging(); err == nil && e != nil {
			err = &Error{Op: fmt.Sprintf("layer %d on %s, staging", w.l+1, w.b.Name()), Err: e}
		}
	}()
	// The chunks kept by an earlier Run, looked up before the builders
	// start (the device's map of kept chunks is this goroutine's).
	kept := make([]*keptChunk, chunks)
	for c := range kept {
		kept[c] = r.opts.Keep.chunk(w.d, w.l, c)
	}
	// nb builders make the next chunks on the host while this goroutine
	// computes chunk c, builder i the chunks c with c%nb == i, each with
	// its own scratch, one chunk waiting in its channel: one chunk's
	// build cannot use a host's cores, several at once can. The rounds
	// of a resident layer are lockstep, the building is not.
	preps := make([]chan prepared, nb)
	busy := make([]time.Duration, nb)
	stop := make(chan struct{})
	var builders sync.WaitGroup
	defer func() {
		close(stop)
		builders.Wait() // the scratches are the next layer's after this
		r.buildSec[w.d] = slices.Max(busy)
	}()
	for i := range nb {
		preps[i] = make(chan prepared, 1)
		builders.Add(1)
		go func() {
			defer builders.Done()
			s := r.scratch[w.d][i]
			for c := i; c < chunks; c += nb {
				t0 := time.Now()
				var p prepared
				var src []int32
				if kc := kept[c]; kc != nil {
					src = kc.src
				} else if p.hc, p.err = buildChunk(r.in, s, w.chunkDst(bounds[c], bounds[c+1]), r.gcnDeg, each); p.err == nil {
					src = p.hc.src
				}
				if p.err == nil && w.rin != nil {
					p.rt, p.err = r.routeOf(w.rin, w.d, src, each)
				}
				busy[i] += time.Since(t0)
				select {
				case preps[i] <- p:
				case <-stop:
					return
				}
			}
		}()
	}
	nodes, lo, _, base := r.nodesOf(w.l, w.d)
	sp := &r.spans[w.d]
	sp.first = time.Now()
	defer func() { sp.last = time.Now() }() // before the builders' stop
	for c := 0; c < max(chunks, w.rounds); c++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c >= chunks { // an empty round: serve the others' requests
			clk := w.clock()
			_, err := w.fetch(ctx, nil, nil, nil)
			clk.mark(phaseInput)
			if err != nil {
				return &Error{Op: fmt.Sprintf("layer %d on %s, round %d of %d (no chunk of its own)", w.l+1, w.b.Name(), c+1, w.rounds), Err: err}
			}
			done.Add(1)
			continue
		}
		var p prepared
		t0 := time.Now()
		select {
		case p = <-preps[c%nb]:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.buildWait[w.d] += time.Since(t0)
		a, b := bounds[c], bounds[c+1]
		dst := w.chunkDst(a, b)
		// Output rows: node IDs, or positions in need at the requested
		// layer when only some nodes are wanted.
		row0 := int(lo) + a
		if nodes != nil {
			row0 = -1
			if w.l == r.last {
				row0 = base + a
			}
		}
		if err := w.chunk(ctx, c, dst, out, row0, a, p, kept[c]); err != nil {
			return &Error{Op: fmt.Sprintf("layer %d on %s, chunk %d of %d (nodes %d to %d)", w.l+1, w.b.Name(), c+1, chunks, dst[0], dst[len(dst)-1]), Err: err}
		}
		done.Add(1)
		r.bar.Add(1)
	}
	if w.exch != nil {
		// The exchanges may be queued asynchronously (NCCL's): a failure
		// shows when they have run.
		if err := r.collective(ctx, "end of the layer", w.exch.Sync); err != nil {
			return &Error{Op: fmt.Sprintf("layer %d on %s", w.l+1, w.b.Name()), Err: err}
		}
	}
	return nil
}

// chunk computes the layer for the destination nodes dst (chunk c of
// the device's layer) and writes their rows of out: rows row0.. in order
// when row0 >= 0, else rows dst[i]; or, when the output stays on the
// devices, rows local.. of the device's own buffer. Its block, sources and their IDs on
// the device come from Options.Keep when an earlier Run kept them, and
// are offered to it otherwise.
func (w *worker) chunk(ctx context.Context, c int, dst []int32, out hostMatrix, row0, local int, p prepared, kc *keptChunk) error {
	r, b := w.r, w.b
	clk := w.clock()
	defer clk.mark(phaseFree) // runs last: after the frees deferred below
	if p.err != nil {
		if w.exch != nil { // tell the others, who wait for this round
			_, p.err = w.fetch(ctx, nil, nil, p.err)
		}
		return p.err
	}
	if kc == nil {
		var err error
		if kc, err = w.upload(p.hc, len(dst)); err != nil {
			if w.exch != nil {
				_, err = w.fetch(ctx, nil, nil, err)
			}
			return err
		}
		if !r.opts.Keep.offer(w.d, w.l, c, kc) {
			defer kc.free()
		}
	}
	blk, src := kc.blk, kc.src
	clk.mark(phaseBlock)
	t := autograd.NewTape(b)
	defer t.Release()
	var x *autograd.Var
	var xs *autograd.SparseInput
	var err error
	if w.rin != nil {
		buf, err := w.fetch(ctx, src, p.rt, nil)
		if err != nil {
			return err
		}
		defer b.Free(buf)
		if x, err = t.Const(buf, len(src), w.rin.width); err != nil {
			return err
		}
	} else if w.l == 0 && r.x.Sparse != nil {
		if xs, err = r.x.Sparse.Gather(b, src); err != nil {
			return err
		}
		defer xs.Free(b)
	} else if w.input != nil {
		width := r.width(w.l)
		idx := kc.idx
		if idx == nil { // kept by a Run that gathered on the host
			if idx, err = b.Alloc(backend.Int32, len(src)); err != nil {
				return err
			}
			defer b.Free(idx)
			if err := b.Upload(idx, src); err != nil {
				return err
			}
		}
		buf, err := b.Alloc(backend.Float32, len(src)*width)
		if err != nil {
			return err
		}
		defer b.Free(buf)
		if err := b.GatherRows(buf, w.input, idx, r.n, width); err != nil {
			return err
		}
		if x, err = t.Const(buf, len(src), width); err != nil {
			return err
		}
	} else {
		buf, width, err := w.uploadInput(src)
		if err != nil {
			return err
		}
		defer b.Free(buf)
		if x, err = t.Const(buf, len(src), width); err != nil {
			return err
		}
	}
	clk.mark(phaseInput)
	y, err := w.layer.ForwardLayer(t, w.l, x, xs, blk)
	if err != nil {
		return err
	}
	clk.mark(phaseForward)
	defer clk.mark(phaseOutput)
	wd := out.width
	if y.Rows != len(dst) || y.Cols != wd {
		return fmt.Errorf("layer produced %d x %d for %d nodes, want width %d", y.Rows, y.Cols, len(dst), wd)
	}
	if w.rout != nil { // kept on the device, in the device's order
		v, err := backend.View(w.rout, local*wd, len(dst)*wd)
		if err != nil {
			return err
		}
		return b.Copy(v, y.Value)
	}
	if w.async != nil {
		return w.downloadAsync(y.Value, out, dst, row0)
	}
	if row0 >= 0 { // consecutive rows: straight into the output
		return b.Download(out.data[row0*wd:(row0+len(dst))*wd], y.Value)
	}
	host := make([]float32, len(dst)*wd)
	if err := b.Download(host, y.Value); err != nil {
		return err
	}
	writeRows(out, host, dst, row0)
	return nil
}

// upload makes a chunk built on the host ready on the device: its block
// (with GCN's source degrees) and, when the layer reads its input from
// a matrix on the device, the sources' IDs.
func (w *worker) upload(hc *hostChunk, nd int) (*keptChunk, error) {
	b := w.b
	// The builder's arrays are this chunk's alone: the block takes them
	// (checked once, by the back end; the CPU's keeps them uncopied).
	blk, err := nn.NewBlockOwned(b, nd, len(hc.src), hc.indptr, hc.indices)
	if err != nil {
		return nil, err
	}
	kc := &keptChunk{b: b, blk: blk, src: hc.src}
	if hc.deg != nil {
		if err := blk.SetSourceDegrees(hc.deg); err != nil {
			kc.free()
			return nil, err
		}
	}
	if w.input != nil {
		if kc.idx, err = b.Alloc(backend.Int32, len(kc.src)); err == nil {
			err = b.Upload(kc.idx, kc.src)
		}
		if err != nil {
			kc.free()
			return nil, err
		}
	}
	return kc, nil
}

// ScratchBytes is the host memory the chunk builders of a Run on devices
// devices take over a graph of nodes nodes (Options.Workers unset).
func ScratchBytes(nodes int64, devices int) int64 {
	n, _ := splitBuilders(defaultWorkers(devices))
	return 8 * nodes * int64(max(devices, 1)*n)
}

// hostInput returns layer l's input matrix in host memory and its width:
// the dense features, or the layer below's output.
func (r *run) hostInput(l int) ([]float32, int) {
	if l == 0 {
		return r.x.Dense, r.x.Cols
	}
	return r.hosts[l-1].data, r.hosts[l-1].width
}

// gatherWorkers is the goroutines a device's host gather of a chunk's
// rows takes.
func (r *run) gatherWorkers() int { return max(1, runtime.GOMAXPROCS(0)/len(r.opts.Backends)) }

// uploadInput returns a new device buffer holding the chunk's source rows
// of the layer's input in host memory (src order) and their width: the
// rows the device keeps a copy of gathered there (w.hot), the others
// gathered on the host and uploaded.
func (w *worker) uploadInput(src []int32) (backend.Buffer, int, error) {
	r, b := w.r, w.b
	rows, width := r.hostInput(w.l)
	if w.hot != nil {
		buf, ok, err := w.gatherHot(src, rows, width)
		if err != nil || ok {
			return buf, width, err
		}
	}
	host, err := w.staging(len(src) * width)
	if err != nil {
		return nil, 0, err
	}
	gatherRows(host, rows, src, width, r.gatherWorkers())
	buf, err := b.Alloc(backend.Float32, len(host))
	if err != nil {
		return nil, 0, err
	}
	if err := b.Upload(buf, host); err == nil {
		err = w.staged()
	}
	if err != nil {
		b.Free(buf)
		return nil, 0, err
	}
	return buf, width, nil
}
