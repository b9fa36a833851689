package fullgraph

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// tagLocalMask derives a device's own dropout seed from a layer's
// (Masks "local"). The run's streams (initial weights, dropout) are
// train.Common's, so one device draws what package train's models draw.
const tagLocalMask uint64 = 3

// Dropout seeds are rng.Derive(stepSeed, layer, purpose), as in package nn.
const (
	seedFeature   = 0
	seedAttention = 1
)

// layerSpec is one GCN, GraphSAGE or GAT layer of the distributed engine.
//
// Payload is what the layer exchanges between devices: the projected
// input X W (GCN) or X W_neigh (SAGE) when project is set (sparse input
// features, or In > Out, as package nn orders the product), else the
// (dropped-out) input X itself; width is its number of columns. A GAT
// layer always projects: its payload is Z = X W, heads x dim wide.
type layerSpec struct {
	in, out, width int
	project, last  bool
	p              float32 // dropout on the layer's input
	w, wn, bias    *nn.Param

	// GAT: heads of dim columns, concatenated (hidden layers) or averaged
	// (mean, the last layer with several heads, through the constant
	// width x out matrix meanM, as nn's GATConv); the source and
	// destination attention vectors; LeakyReLU slope and attention dropout.
	heads, dim   int
	mean         bool
	meanM        backend.Buffer
	attnL, attnR *nn.Param
	slope, attnP float32
}

// blockMat is a sparse operator on the device: structure and per-entry
// weights (a is nil when it has no entries).
type blockMat struct {
	a backend.Sparse
	w backend.Buffer
}

func (bm *blockMat) free(b backend.Backend) {
	if bm.a != nil {
		b.FreeSparse(bm.a)
	}
	b.Free(bm.w)
	*bm = blockMat{}
}

// worker is one device's share of a run of the distributed engine.
type worker struct {
	rank, p int
	cfg     *Config
	b       *meter
	c       comm.Comm // nil with one device
	ctx     context.Context
	lay     *Layout
	lo, n   int
	classes int

	specs  []layerSpec
	params []*nn.Param
	opt    optim.Optimizer

	// agg is this device's rows of the normalized adjacency over all N
	// columns (Layout.Rows): one SpMM over the layer's N-row matrix
	// aggregates every source block, summing each row's entries in the
	// single-device order (GAT: the structure only, weighted by the
	// attention). back[s] (GCN and GraphSAGE) is the transpose of A_ds
	// restricted to the rows of block s this device reads (s == rank: all
	// of them): its product with the output gradient is this device's
	// gradient contribution to block s, packed.
	agg     blockMat
	back    []blockMat
	recvIdx []backend.Buffer      // Used[r][rank] for every device r reading this block
	xs      *autograd.SparseInput // this block's input features when sparse
	xsOff   int64                 // global position of xs's first non-zero
	xd      backend.Buffer        // dense input features

	trainRows, trainLabels backend.Buffer
	nTrain, nTrainAll      int
	splits                 [3]train.Labeled // the train, val and test nodes of this block (rows within it)

	st    []*layerState
	stats CommStats // this device's view; the flag exchanges make it global
	ep    epochComm
	act   []int64 // activation bytes kept by each layer (first step)

	epsScale float64 // adaptive scale of the variation bound this epoch

	hostA, hostB []float32 // staging for communication
	maskHost     []float32

	// dc moves the embedding blocks, gradient contributions and weight
	// gradients between device buffers (NCCL, GPU shared memory); nil
	// stages them through host memory over c. c still carries the small
	// control messages (staleness flags, losses, evaluation counts).
	dc       comm.Comm
	gradFlat backend.Buffer // the parameter gradients, packed for dc's all-reduce
	fused    fusedOps       // BiasAct and ReLUMaskScale, the back end's or composed

	gat gatState // GAT's selectors and halo indices (gat.go)

	halo [2]*haloSet // Exchange "halo": haloAll, haloTrain (halo.go); nil otherwise

	// task is Options.Task's part on this device (nil: node
	// classification); its parameters follow the layers' in params
	// (nLayerParams of them are the layers').
	task         TaskReplica
	nLayerParams int
}

func layerName(l int) string { return fmt.Sprintf("layer%d", l) }

// buildParams creates the layers' parameters exactly as nn.New does for
// cfg.ModelConfig (and newTapeModel: same names, shapes, order and
// seeds).
func buildParams(b backend.Backend, cfg *Config, inDim, outDim int) ([]layerSpec, []*nn.Param, error) {
	kind, hidden, layers := cfg.Model, cfg.Hidden, cfg.Layers
	seed := cfg.ModelConfig(inDim, outDim).Seed
	specs := make([]layerSpec, layers)
	var ps []*nn.Param
	for l := range specs {
		in, out := hidden, hidden
		if l == 0 {
			in = inDim
		} else if kind == GAT {
			in = specs[l-1].out
		}
		if l == layers-1 {
			out = outDim
		}
		sp := &specs[l]
		sp.in, sp.out, sp.last = in, out, l == layers-1
		s := rng.Derive(seed, uint64(l))
		switch kind {
		case GCN:
			c, err := nn.NewGCNConv(b, layerName(l), in, out, s)
			if err != nil {
				nn.FreeParams(b, ps)
				return nil, nil, err
			}
			sp.w, sp.bias = c.W, c.B
			ps = append(ps, c.Params()...)
		case SAGE:
			c, err := nn.NewSAGEConv(b, layerName(l), in, out, s)
			if err != nil {
				nn.FreeParams(b, ps)
				return nil, nil, err
			}
			sp.w, sp.wn, sp.bias = c.WSelf, c.WNeigh, c.B
			ps = append(ps, c.Params()...)
		case GAT:
			c, err := newGATConv(b, cfg, l, in, outDim, s)
			if err != nil {
				nn.FreeParams(b, ps)
				return nil, nil, err
			}
			sp.out, sp.heads, sp.dim, sp.mean = c.OutDim(), c.Heads, c.Dim, !c.Concat && c.Heads > 1
			sp.slope, sp.attnP = c.NegativeSlope, c.AttnDropout
			sp.w, sp.attnL, sp.attnR, sp.bias = c.W, c.AttnL, c.AttnR, c.B
			ps = append(ps, c.Params()...)
		default:
			return nil, nil, cfgErr("model", "unknown model %q", kind)
		}
	}
	return specs, ps, nil
}

// newWorker sets up device rank: its rows of the adjacency, its features,
// labels and a replica of the model (every device initializes the same
// weights from the same seed).
func newWorker(ctx context.Context, rank int, b backend.Backend, c comm.Comm, dc comm.Comm, cfg *Config, pr *prepared, lay *Layout, task Task) (*worker, error) {
	p := lay.P()
	lo, hi := lay.Range(rank)
	w := &worker{rank: rank, p: p, cfg: cfg, b: newMeter(b), c: c, dc: dc, ctx: ctx, lay: lay, lo: lo, n: hi - lo,
		classes: pr.ds.NumClasses}
	if task != nil {
		w.classes = task.OutDim()
	}
	w.fused = newFusedOps(b, w.b)
	// w is freed on every early return: the returns name no result (a
	// named one would be nil by the time a deferred cleanup ran).
	built := false
	defer func() {
		if !built {
			w.free()
		}
	}()
	mb := w.b
	var err error
	w.specs, w.params, err = buildParams(mb, cfg, pr.ds.FeatDim, w.classes)
	if err != nil {
		return nil, err
	}
	w.nLayerParams = len(w.params)
	if task != nil {
		if w.task, err = task.Replica(rank, mb); err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: task: %w", rank, err)
		}
		w.params = append(w.params, w.task.Params()...)
	}
	sparse := pr.feats.Sparse != nil
	for l := range w.specs {
		sp := &w.specs[l]
		sp.project = (l == 0 && sparse) || sp.in > sp.out
		sp.width = sp.in
		if sp.project {
			sp.width = sp.out
		}
		if cfg.Model == GAT {
			sp.project, sp.width = true, sp.heads*sp.dim
		}
		sp.p = float32(cfg.Dropout)
	}
	w.opt = cfg.NewOptimizer(mb, w.params)

	rows := &lay.Rows[rank]
	if rows.NNZ() > 0 {
		if w.agg.a, err = mb.NewSparse(rows.Rows, rows.Cols, rows.Indptr, rows.Indices); err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: adjacency: %w", rank, err)
		}
		if cfg.Model != GAT { // GAT weighs the edges with its attention
			if w.agg.w, err = upload(mb, rows.Weights); err != nil {
				return nil, err
			}
		}
	}
	w.back = make([]blockMat, p)
	for s := 0; s < p && cfg.Model != GAT; s++ { // GAT gathers its contributions (gat.go)
		sb := &lay.Blocks[rank][s]
		if sb.NNZ() == 0 {
			continue
		}
		t, err := sb.Transpose(lay.Used[rank][s])
		if err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: block %d: %w", rank, s, err)
		}
		bm := &w.back[s]
		if bm.a, err = mb.NewSparse(t.Rows, t.Cols, t.Indptr, t.Indices); err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: block %d: %w", rank, s, err)
		}
		if bm.w, err = upload(mb, t.Weights); err != nil {
			return nil, err
		}
	}
	// The rows of this block that every other device reads: where their
	// gradient contributions land.
	w.recvIdx = make([]backend.Buffer, p)
	for r := 0; r < p; r++ {
		if r != rank && lay.NNZ(r, rank) > 0 {
			if w.recvIdx[r], err = uploadI32(mb, lay.Used[r][rank]); err != nil {
				return nil, err
			}
		}
	}

	if cfg.Model == GAT {
		if err := w.initGAT(); err != nil {
			return nil, err
		}
	}
	if cfg.Exchange == ExchangeHalo && p > 1 {
		if err := w.initHalo(pr.ds.Train); err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: halo: %w", rank, err)
		}
	}

	f := pr.feats
	if h := f.Sparse; h != nil {
		base := h.Indptr[lo]
		ip := make([]int64, w.n+1)
		for i := range ip {
			ip[i] = h.Indptr[lo+i] - base
		}
		end := h.Indptr[hi]
		if w.xs, err = autograd.NewSparseInput(mb, w.n, h.Cols, ip, h.Indices[base:end], h.Values[base:end]); err != nil {
			return nil, fmt.Errorf("fullgraph: device %d: features: %w", rank, err)
		}
		w.xsOff = base
	} else if w.xd, err = upload(mb, f.Dense[lo*f.Cols:hi*f.Cols]); err != nil {
		return nil, err
	}

	ds := pr.ds
	for i, set := range [][]int32{ds.Train, ds.Val, ds.Test} {
		sp := &w.splits[i]
		for _, v := range set {
			if int(v) >= lo && int(v) < hi {
				sp.Rows = append(sp.Rows, v-int32(lo))
				sp.Labels = append(sp.Labels, ds.Labels[v])
			}
		}
	}
	tr := &w.splits[train.SplitTrain]
	w.nTrain, w.nTrainAll = len(tr.Rows), len(ds.Train)
	if w.nTrain > 0 {
		if w.trainRows, err = uploadI32(mb, tr.Rows); err != nil {
			return nil, err
		}
		if w.trainLabels, err = uploadI32(mb, tr.Labels); err != nil {
			return nil, err
		}
	}
	w.st = make([]*layerState, len(w.specs))
	for l, sp := range w.specs {
		w.st[l] = newLayerState(p)
		for s := 0; s < p; s++ {
			w.stats.Blocks = append(w.stats.Blocks, BlockStats{Layer: l, Block: s, Rows: lay.Size(s), Width: sp.width})
		}
	}
	built = true
	return w, nil
}

func upload(b backend.Backend, v []float32) (backend.Buffer, error) {
	buf, err := b.Alloc(backend.Float32, len(v))
	if err != nil {
		return nil, fmt.Errorf("fullgraph: upload: %w", err)
	}
	if err := b.Upload(buf, v); err != nil {
		b.Free(buf)
		return nil, fmt.Errorf("fullgraph: upload: %w", err)
	}
	return buf, nil
}

func uploadI32(b backend.Backend, v []int32) (backend.Buffer, error) {
	buf, err := b.Alloc(backend.Int32, len(v))
	if err != nil {
		return nil, fmt.Errorf("fullgraph: upload: %w", err)
	}
	if err := b.Upload(buf, v); err != nil {
		b.Free(buf)
		return nil, fmt.Errorf("fullgraph: upload: %w", err)
	}
	return buf, nil
}

// free returns everything the worker holds to the back end.
func (w *worker) free() {
	if w == nil {
		return
	}
	b := w.b
	if w.opt != nil {
		w.opt.Free()
	}
	nn.FreeParams(b, w.params[:w.nLayerParams])
	if w.task != nil {
		w.task.Free()
	}
	w.agg.free(b)
	for i := range w.back {
		w.back[i].free(b)
	}
	b.Free(w.gradFlat)
	for _, x := range w.recvIdx {
		b.Free(x)
	}
	w.xs.Free(b)
	for _, buf := range []backend.Buffer{w.xd, w.trainRows, w.trainLabels} {
		b.Free(buf)
	}
	for _, st := range w.st {
		st.free(b)
	}
	for _, sp := range w.specs {
		b.Free(sp.meanM)
	}
	w.gat.free(b)
	for _, h := range w.halo {
		h.free(b)
	}
	*w = worker{b: b}
}

// dropout writes dst = x * mask with the mask of elements
// [off, off+len) of the layer's whole input: what one device would draw
// for these rows. Offset 0 (one device, or the first block) is the back
// end's own Dropout; other blocks draw their masks on the host, unless
// Masks is local.
func (w *worker) dropout(s *step, dst, mask, x backend.Buffer, p float32, seed uint64, off int64) {
	w.dropoutAs(s, dst, mask, x, p, seed, off, w.rank)
}

// dropoutAs is dropout as the device of rank applies it to its rows
// starting at element off: any device can draw another's mask.
func (w *worker) dropoutAs(s *step, dst, mask, x backend.Buffer, p float32, seed uint64, off int64, rank int) {
	if !s.ok() {
		return
	}
	if off == 0 {
		s.do(w.b.Dropout(dst, mask, x, p, seed))
		return
	}
	if w.cfg.Masks == MasksLocal {
		s.do(w.b.Dropout(dst, mask, x, p, rng.Derive(seed, tagLocalMask, uint64(rank))))
		return
	}
	n := mask.Len()
	if cap(w.maskHost) < n {
		w.maskHost = make([]float32, n)
	}
	m := w.maskHost[:n]
	keep := 1 / (1 - p)
	parallel(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v := float32(0)
			if rng.DropUniform(seed, uint64(off)+uint64(i)) >= p {
				v = keep
			}
			m[i] = v
		}
	})
	s.do(w.b.Upload(mask, m))
	if s.ok() {
		s.do(w.b.Mul(dst, x, mask))
	}
}

// parallel runs fn over [0, n) in chunks on all cores; every element is
// computed by exactly one call, so results do not depend on scheduling.
func parallel(n int, fn func(lo, hi int)) {
	const grain = 1 << 15
	workers := runtime.GOMAXPROCS(0)
	if n < 2*grain || workers == 1 {
		fn(0, n)
		return
	}
	chunks := min(workers, (n+grain-1)/grain)
	size := (n + chunks - 1) / chunks
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, min(lo+size, n))
		}()
	}
	wg.Wait()
}
