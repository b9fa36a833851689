package infer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// scratch maps global node IDs to a chunk's local source IDs without
// clearing anything between chunks: stamp[v] == cur marks v as a source
// of the current chunk, with local ID local[v].
type scratch struct {
	stamp, local []int32
	cur          int32
}

func (s *scratch) next() {
	s.cur++
	if s.cur == 0 || s.cur == 1<<31-1 { // wrapped: start the stamps afresh
		clear(s.stamp)
		s.cur = 1
	}
}

// worker computes one layer's chunks on one device.
type worker struct {
	r     *run
	d     int
	b     backend.Backend
	layer nn.Layered
	l     int
	input backend.Buffer // the layer's input matrix on the device, nil: gather on the host
	rin   *resLayer      // the layer's input kept on the devices (overrides input)
	rout  backend.Buffer // this device's rows of the layer's output kept on the devices
	exch  comm.Comm      // rin's exchange with the other devices (several devices)
	// rounds is the number of exchange rounds every device runs in
	// lockstep (rin on several devices), 0 otherwise.
	rounds int

	// stage holds a chunk's source rows gathered on the host, reused
	// across the layer's chunks (no zeroing per chunk) and pinned where
	// the back end has pinned memory, so that its upload runs at the
	// link's rate; pin owns it then.
	stage []float32
	pin   backend.HostBuffer
}

// staging returns n floats of the worker's staging memory, growing it by
// a quarter more than asked when short. The previous chunk's upload has
// completed: each chunk ends with a download, which waits for the queue.
func (w *worker) staging(n int) []float32 {
	if cap(w.stage) >= n {
		return w.stage[:n]
	}
	w.freeStaging()
	size := n + n/4
	if pm, ok := w.b.(backend.PinnedMemory); ok {
		if hb, err := pm.AllocPinned(uint64(size)*4, false); err == nil {
			w.pin, w.stage = hb, hb.Float32s()[:size]
			return w.stage[:n]
		}
	}
	w.stage = make([]float32, size)
	return w.stage[:n]
}

func (w *worker) freeStaging() {
	if w.pin != nil {
		w.pin.Free()
	}
	w.pin, w.stage = nil, nil
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

func (w *worker) run(ctx context.Context, bounds []int, out hostMatrix, done *atomic.Int64) error {
	r := w.r
	chunks := max(len(bounds)-1, 0)
	if chunks == 0 && w.rounds == 0 {
		return nil
	}
	if r.scratch[w.d] == nil {
		r.scratch[w.d] = &scratch{stamp: make([]int32, r.n), local: make([]int32, r.n)}
	}
	defer w.freeStaging()
	nodes, lo, _, base := r.nodesOf(w.l, w.d)
	for c := 0; c < max(chunks, w.rounds); c++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c >= chunks { // an empty round: serve the others' requests
			if _, err := w.fetch(ctx, nil, nil); err != nil {
				return &Error{Op: fmt.Sprintf("layer %d on %s, round %d of %d (no chunk of its own)", w.l+1, w.b.Name(), c+1, w.rounds), Err: err}
			}
			done.Add(1)
			continue
		}
		a, b := bounds[c], bounds[c+1]
		dst := make([]int32, b-a)
		for i := range dst {
			if nodes != nil {
				dst[i] = nodes[a+i]
			} else {
				dst[i] = int32(lo + int64(a+i))
			}
		}
		// Output rows: node IDs, or positions in need at the requested
		// layer when only some nodes are wanted.
		row0 := int(lo) + a
		if nodes != nil {
			row0 = -1
			if w.l == r.last {
				row0 = base + a
			}
		}
		if err := w.chunk(ctx, c, dst, out, row0, a); err != nil {
			return &Error{Op: fmt.Sprintf("layer %d on %s, chunk %d of %d (nodes %d to %d)", w.l+1, w.b.Name(), c+1, chunks, dst[0], dst[len(dst)-1]), Err: err}
		}
		done.Add(1)
		r.bar.Add(1)
	}
	return nil
}

// chunk computes the layer for the destination nodes dst (chunk c of
// the device's layer) and writes their rows of out: rows row0.. in order
// when row0 >= 0, else rows dst[i]; or, when the output stays on the
// devices, rows local.. of the device's own buffer. Its block, sources and their IDs on
// the device come from Options.Keep when an earlier Run kept them, and
// are offered to it otherwise.
func (w *worker) chunk(ctx context.Context, c int, dst []int32, out hostMatrix, row0, local int) error {
	r, b := w.r, w.b
	kc := r.opts.Keep.chunk(w.d, w.l, c)
	if kc == nil {
		var err error
		if kc, err = w.build(dst); err != nil {
			if w.exch != nil { // tell the others, who wait for this round
				_, err = w.fetch(ctx, nil, err)
			}
			return err
		}
		kc.b = b
		if w.input != nil {
			if kc.idx, err = b.Alloc(backend.Int32, len(kc.src)); err == nil {
				err = b.Upload(kc.idx, kc.src)
			}
			if err != nil {
				kc.free()
				return err
			}
		}
		if !r.opts.Keep.offer(w.d, w.l, c, kc) {
			defer kc.free()
		}
	}
	blk, src := kc.blk, kc.src
	t := autograd.NewTape(b)
	defer t.Release()
	var x *autograd.Var
	var xs *autograd.SparseInput
	var err error
	if w.rin != nil {
		buf, err := w.fetch(ctx, src, nil)
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
		var rows []float32
		width := r.x.Cols
		if w.l == 0 {
			rows = r.x.Dense
		} else {
			rows, width = r.hosts[w.l-1].data, r.hosts[w.l-1].width
		}
		host := w.staging(len(src) * width)
		gatherRows(host, rows, src, width, max(1, runtime.GOMAXPROCS(0)/len(r.opts.Backends)))
		buf, err := b.Alloc(backend.Float32, len(host))
		if err != nil {
			return err
		}
		defer b.Free(buf)
		if err := b.Upload(buf, host); err != nil {
			return err
		}
		if x, err = t.Const(buf, len(src), width); err != nil {
			return err
		}
	}
	y, err := w.layer.ForwardLayer(t, w.l, x, xs, blk)
	if err != nil {
		return err
	}
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
	if row0 >= 0 { // consecutive rows: straight into the output
		return b.Download(out.data[row0*wd:(row0+len(dst))*wd], y.Value)
	}
	host := make([]float32, len(dst)*wd)
	if err := b.Download(host, y.Value); err != nil {
		return err
	}
	for i, v := range dst {
		copy(out.data[int(v)*wd:(int(v)+1)*wd], host[i*wd:(i+1)*wd])
	}
	return nil
}

// build makes the block of dst's in-edges (the nodes first among the
// sources, as nn.Block wants) and the source list.
func (w *worker) build(dst []int32) (*keptChunk, error) {
	r, b := w.r, w.b
	s := r.scratch[w.d]
	s.next()
	in := r.in
	src := make([]int32, len(dst), len(dst)*2)
	for i, v := range dst {
		s.stamp[v], s.local[v] = s.cur, int32(i)
		src[i] = v
	}
	indptr := make([]int64, len(dst)+1)
	edges := int64(0)
	for _, v := range dst {
		edges += in.Indptr[v+1] - in.Indptr[v]
	}
	indices := make([]int32, 0, edges)
	for i, v := range dst {
		for _, u := range in.Indices[in.Indptr[v]:in.Indptr[v+1]] {
			if s.stamp[u] != s.cur {
				s.stamp[u], s.local[u] = s.cur, int32(len(src))
				src = append(src, u)
			}
			indices = append(indices, s.local[u])
		}
		indptr[i+1] = int64(len(indices))
	}
	blk, err := nn.NewBlock(b, len(dst), len(src), indptr, indices)
	if err != nil {
		return nil, err
	}
	if r.gcnDeg != nil {
		deg := make([]int64, len(src))
		for i, u := range src {
			deg[i] = r.gcnDeg[u]
		}
		if err := blk.SetSourceDegrees(deg); err != nil {
			blk.Free()
			return nil, err
		}
	}
	return &keptChunk{blk: blk, src: src}, nil
}
