package train

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// sparseThreshold is the density below which features are kept sparse:
// bag-of-words features (Cora 1.3%, CiteSeer 0.9%) make the first layer's
// X*W an SpMM that is tens of times cheaper than a dense product.
const sparseThreshold = 0.25

// Features is a dataset's feature matrix as the trainers feed it:
// row-normalized as Common.RowNorm says, and in CSR form (Sparse) when
// fewer than a quarter of its values are non-zero, else dense (Dense,
// Rows x Cols). Run and package fullgraph prepare it with NewFeatures.
type Features struct {
	Rows, Cols int
	Dense      []float32            // when not sparse
	Sparse     *autograd.HostSparse // when sparse
	// RowNormalized says whether the rows were divided by their sums
	// (RowNormAuto decides by the features' sign).
	RowNormalized bool
	// BF16 says that every value is a bfloat16 (Round): devices store
	// the dense rows as backend.BFloat16.
	BF16 bool

	ownDense bool // Dense is not NewFeatures' x
}

// NewFeatures prepares x (rows x cols, row-major; not modified) with the
// row normalization rowNorm (RowNormAuto, RowNormOn or RowNormOff).
func NewFeatures(x []float32, rows, cols int, rowNorm string) (*Features, error) {
	f := NewDenseFeatures(x, rows, cols, rowNorm)
	if !MostlyZero(f.Dense) {
		return f, nil
	}
	var err error
	f.Sparse, err = autograd.HostSparseFromDense(rows, cols, f.Dense)
	f.Dense = nil
	return f, err
}

// NewDenseFeatures is NewFeatures keeping the rows dense whatever their
// density (dsp/engine's devices gather and cache dense rows).
func NewDenseFeatures(x []float32, rows, cols int, rowNorm string) *Features {
	f := &Features{Rows: rows, Cols: cols, Dense: x}
	if f.RowNormalized = rowNorm == RowNormOn || (rowNorm == RowNormAuto && nonNegative(x)); f.RowNormalized {
		f.Dense, f.ownDense = dataset.RowNormalize(x, cols), true
	}
	return f
}

// MostlyZero reports whether fewer than a quarter of x's values are
// non-zero: NewFeatures keeps such features sparse. Chunks of x are
// counted in parallel, and the count stops once a quarter of the values
// are known to be non-zero (dense features), so the answer is the same
// for any GOMAXPROCS.
func MostlyZero(x []float32) bool {
	limit := sparseThreshold * float64(len(x))
	var nnz atomic.Int64
	scanChunks(len(x), func(lo, hi int) bool {
		n := 0
		for _, v := range x[lo:hi] {
			if v != 0 {
				n++
			}
		}
		return float64(nnz.Add(int64(n))) < limit
	})
	return float64(nnz.Load()) < limit
}

// NonNegative reports whether every value of x is >= 0 (no NaN): the
// features RowNorm auto row-normalizes. It stops at the first negative
// value, so it is quick on signed features.
func NonNegative(x []float32) bool { return nonNegative(x) }

// nonNegative reports whether every value of x is >= 0 (no NaN), in
// parallel chunks, stopping at the first negative one any chunk finds.
func nonNegative(x []float32) bool {
	var neg atomic.Bool
	scanChunks(len(x), func(lo, hi int) bool {
		for _, v := range x[lo:hi] {
			if !(v >= 0) {
				neg.Store(true)
				return false
			}
		}
		return !neg.Load()
	})
	return !neg.Load()
}

// scanBlock is how many values scanChunks hands over at a time: large
// enough that its bookkeeping is noise, small enough to stop early.
const scanBlock = 1 << 16

// scanChunks splits [0, n) into one contiguous chunk per CPU and calls
// scan on consecutive blocks of each chunk until it returns false (for
// any block of any chunk: stop everywhere) or the chunk ends.
func scanChunks(n int, scan func(lo, hi int) bool) {
	parts := max(min(runtime.GOMAXPROCS(0), n/scanBlock), 1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Go(func() {
			for b := lo; b < hi && !stop.Load(); b += scanBlock {
				if !scan(b, min(b+scanBlock, hi)) {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
}

// gatherRows returns the listed rows of the row-major matrix x (c
// columns), in order; in parallel blocks, since at papers100M's size a
// sampled batch reads about 660k random rows (337 MB).
func gatherRows(x []float32, c int, rows []int32) []float32 {
	out := make([]float32, len(rows)*c)
	scanChunks(len(rows), func(lo, hi int) bool {
		for i := lo; i < hi; i++ {
			v := int(rows[i])
			copy(out[i*c:(i+1)*c], x[v*c:(v+1)*c])
		}
		return true
	})
	return out
}

// gatherSparse returns the listed rows of the sparse features (e.g. a
// mini-batch's input nodes, in order) as a host CSR matrix: what
// HostSparse.Gather uploads, kept on the host so that the input dropout
// can draw the dense matrix's mask (nn.ForwardSparseAsDense).
func (f *Features) gatherSparse(rows []int32) (*autograd.HostSparse, error) {
	h := f.Sparse
	nnz := int64(0)
	for i, r := range rows {
		if r < 0 || int(r) >= h.Rows {
			return nil, fmt.Errorf("features: row %d (position %d) out of range [0, %d)", r, i, h.Rows)
		}
		nnz += h.Indptr[r+1] - h.Indptr[r]
	}
	out := &autograd.HostSparse{Rows: len(rows), Cols: h.Cols, Indptr: make([]int64, len(rows)+1),
		Indices: make([]int32, 0, nnz), Values: make([]float32, 0, nnz)}
	for i, r := range rows {
		lo, hi := h.Indptr[r], h.Indptr[r+1]
		out.Indices = append(out.Indices, h.Indices[lo:hi]...)
		out.Values = append(out.Values, h.Values[lo:hi]...)
		out.Indptr[i+1] = int64(len(out.Indices))
	}
	return out, nil
}

// inputs are the features on a back end, uploaded when first needed, and
// the forward passes that read them.
type inputs struct {
	b backend.Backend
	f *Features
	// hostRows makes forwardBatch gather a batch's dense rows on the
	// host and upload them alone, never the whole matrix (an
	// evaluator's own inputs for sampled evaluation: graphs too large
	// for one pass).
	hostRows bool
	xs       *autograd.SparseInput // the whole sparse matrix
	xd       backend.Buffer        // the whole dense matrix
}

func (in *inputs) free() {
	in.xs.Free(in.b)
	if in.xd != nil {
		in.b.Free(in.xd)
	}
	in.xs, in.xd = nil, nil
}

// upload puts the whole matrix on the back end (sparse or dense; dense
// bfloat16 features as a BFloat16 buffer).
func (in *inputs) upload() error {
	if in.xs != nil || in.xd != nil {
		return nil
	}
	f := in.f
	var err error
	if h := f.Sparse; h != nil {
		in.xs, err = autograd.NewSparseInput(in.b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values)
	} else if f.BF16 {
		in.xd, err = uploadBF16(in.b, f.Dense)
	} else if in.xd, err = in.b.Alloc(backend.Float32, len(f.Dense)); err == nil {
		if err = in.b.Upload(in.xd, f.Dense); err != nil {
			in.b.Free(in.xd)
			in.xd = nil
		}
	}
	if err != nil {
		return &RunError{Op: "upload features", Err: err}
	}
	return nil
}

// uploadBF16 puts x (whose values are bfloat16s) on b as a BFloat16
// buffer.
func uploadBF16(b backend.Backend, x []float32) (backend.Buffer, error) {
	enc := make([]uint16, len(x))
	backend.ToBF16(enc, x)
	buf, err := b.Alloc(backend.BFloat16, len(enc))
	if err != nil {
		return nil, err
	}
	if err := b.Upload(buf, enc); err != nil {
		b.Free(buf)
		return nil, err
	}
	return buf, nil
}

// dense returns the whole dense matrix as a float32 Var of t: the
// uploaded buffer itself, or its float32 widening owned by t when it is
// bfloat16.
func (in *inputs) dense(t *autograd.Tape) (*autograd.Var, error) {
	if in.xd.DType() == backend.BFloat16 {
		return t.Widen(in.xd, in.f.Rows, in.f.Cols)
	}
	return t.Const(in.xd, in.f.Rows, in.f.Cols)
}

// forwardFull runs model over the whole graph (blocks: the whole graph's
// block, once per layer).
func (in *inputs) forwardFull(t *autograd.Tape, model nn.Model, blocks []*nn.Block, train bool, seed uint64) (*autograd.Var, error) {
	if err := in.upload(); err != nil {
		return nil, err
	}
	if in.xs != nil {
		return model.ForwardSparse(t, in.xs, blocks, train, seed)
	}
	x, err := in.dense(t)
	if err != nil {
		return nil, err
	}
	return model.Forward(t, x, blocks, train, seed)
}

// forwardBatch uploads a mini-batch's blocks and input features and runs
// model; the logits' rows are the batch's seeds in order. cleanup frees
// what was uploaded (call it after the tape is done).
func (in *inputs) forwardBatch(t *autograd.Tape, model nn.Model, mb *sample.MiniBatch, train bool, seed uint64) (*autograd.Var, func(), error) {
	b := in.b
	var blocks []*nn.Block
	var xs *autograd.SparseInput
	var idx backend.Buffer
	cleanup := func() {
		nn.FreeBlocks(blocks)
		xs.Free(b)
		if idx != nil {
			b.Free(idx)
		}
	}
	if layers := model.Config().Layers; len(mb.Blocks) != layers {
		return nil, cleanup, fmt.Errorf("sampler returned %d blocks for %d layers", len(mb.Blocks), layers)
	}
	blocks, err := nn.UploadBlocks(b, mb)
	if err != nil {
		return nil, cleanup, err
	}
	rows := mb.InputNodes()
	if in.f.Sparse != nil {
		// The dense rows' dropout masks: the loss does not depend on
		// whether the features are stored sparse (here) or dense (a
		// BatchSource, dsp/engine).
		h, err := in.f.gatherSparse(rows)
		if err != nil {
			return nil, cleanup, err
		}
		if xs, err = autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values); err != nil {
			return nil, cleanup, err
		}
		out, err := nn.ForwardSparseAsDense(model, t, xs, h, blocks, train, seed)
		return out, cleanup, err
	}
	if in.hostRows {
		c := in.f.Cols
		host := gatherRows(in.f.Dense, c, rows)
		xd, err := b.Alloc(backend.Float32, len(host))
		if err != nil {
			return nil, cleanup, err
		}
		free := cleanup
		cleanup = func() { free(); b.Free(xd) }
		if err := b.Upload(xd, host); err != nil {
			return nil, cleanup, err
		}
		x, err := t.Const(xd, len(rows), c)
		if err != nil {
			return nil, cleanup, err
		}
		out, err := model.Forward(t, x, blocks, train, seed)
		return out, cleanup, err
	}
	if err := in.upload(); err != nil {
		return nil, cleanup, err
	}
	if idx, err = upload(b, rows); err != nil {
		return nil, cleanup, err
	}
	// The features are a constant: gathering them needs no gradient
	// (and reads a bfloat16 table directly). With bfloat16 activations
	// the rows are gathered as bfloat16, with the model's input dropout
	// applied as they are written (the tape does not drop bfloat16
	// activations by itself).
	var p float32
	var pseed uint64
	if train && t.Activations() == backend.BFloat16 {
		if ip, s, ok := nn.InputDropout(model, seed); ok {
			p, pseed = ip, s
		}
	}
	x, err := t.GatherConstDropped(in.xd, in.f.Rows, in.f.Cols, idx, p, pseed)
	if err != nil {
		return nil, cleanup, err
	}
	out, err := model.Forward(t, x, blocks, train, seed)
	return out, cleanup, err
}
