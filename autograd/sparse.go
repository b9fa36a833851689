package autograd

import (
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// SpMM aggregates messages over the sparse matrix a (rows = destinations,
// cols = sources): out[i, h*D+d] = sum over edges e=(i,j) of
// w[e,h] * x[j, h*D+d], with heads H = w.Cols and D = x.Cols/H.
// x is a.NumCols() x H*D; out is a.NumRows() x H*D. w (nnz x H) may be nil,
// meaning all-ones weights and one head (plain sum aggregation); constant
// weights (mean, GCN normalization) are Vars without gradient.
//
// Backward: dx += A^T(w) dy (transposed SpMM, deterministic on CPU);
// dw[e,h] += <dy[i,h,:], x[j,h,:]> (SDDMM dot).
func (t *Tape) SpMM(a backend.Sparse, x, w *Var) (*Var, error) {
	const op = "SpMM"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errf(op, "nil sparse matrix")
	}
	heads := 1
	var wv backend.Buffer
	if w != nil {
		if err := t.check(op, w); err != nil {
			return nil, err
		}
		if w.Rows != a.NNZ() || w.Cols < 1 {
			return nil, errf(op, "edge weights are %dx%d, want %d x heads", w.Rows, w.Cols, a.NNZ())
		}
		heads, wv = w.Cols, w.Value
	}
	if x.Rows != a.NumCols() {
		return nil, errf(op, "x has %d rows, sparse matrix has %d columns", x.Rows, a.NumCols())
	}
	if x.Cols%heads != 0 {
		return nil, errf(op, "x width %d is not a multiple of %d heads", x.Cols, heads)
	}
	width := x.Cols
	if x.DType() == backend.BFloat16 && (heads != 1 || (w != nil && w.RequiresGrad)) {
		return nil, errf(op, "bfloat16 x with %d heads or learned edge weights: one head of constant weights only", heads)
	}
	out, err := t.newVarT(op, x.DType(), a.NumRows(), width, anyGrad(x, w))
	if err != nil {
		return nil, err
	}
	if err := t.b.SpMM(out.Value, a, false, x.Value, wv, heads, width); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		if err := t.accumulate(op, x, func(dst backend.Buffer) error {
			return t.b.SpMM(dst, a, true, out.Grad, wv, heads, width)
		}); err != nil {
			return err
		}
		if w == nil {
			return nil
		}
		return t.accumulate(op, w, func(dst backend.Buffer) error {
			return t.b.SDDMM(backend.SDDMMDot, dst, a, out.Grad, x.Value, heads, width/heads)
		})
	})
	return out, nil
}

// AggregateConcat returns [x_dst | A(w) x], a.NumRows() x 2*x.Cols: row
// i holds x's row i (a block lists its destinations first among its
// sources), then the sum of w[e] x[j] over its entries e = (i, j), in
// x's dtype. Times [W_self; W_neigh] it is a GraphSAGE layer's two
// products in one (one product of twice the depth runs faster than two,
// and a bfloat16 row of 2*x.Cols values is aligned where one of x.Cols
// may not be). The tape's back end must be a backend.ConcatAggregator;
// x and w must not need gradients (a layer's input features and
// constant weights): the op has no backward.
func (t *Tape) AggregateConcat(a backend.Sparse, x, w *Var) (*Var, error) {
	const op = "AggregateConcat"
	if err := t.check(op, x); err != nil {
		return nil, err
	}
	ca, ok := t.b.(backend.ConcatAggregator)
	if !ok {
		return nil, errf(op, "back end %s has no concatenated aggregation", t.b.Name())
	}
	if a == nil {
		return nil, errf(op, "nil sparse matrix")
	}
	var wv backend.Buffer
	if w != nil {
		if err := t.check(op, w); err != nil {
			return nil, err
		}
		if w.Rows != a.NNZ() || w.Cols != 1 {
			return nil, errf(op, "edge weights are %dx%d, want %d x 1", w.Rows, w.Cols, a.NNZ())
		}
		wv = w.Value
	}
	if x.RequiresGrad || (w != nil && w.RequiresGrad) {
		return nil, errf(op, "x or w needs a gradient: the op has no backward")
	}
	if x.Rows != a.NumCols() || a.NumRows() > x.Rows {
		return nil, errf(op, "x has %d rows, sparse matrix is %dx%d (destinations first among the sources)", x.Rows, a.NumRows(), a.NumCols())
	}
	out, err := t.newVarT(op, x.DType(), a.NumRows(), 2*x.Cols, false)
	if err != nil {
		return nil, err
	}
	if err := ca.SpMMConcat(out.Value, a, x.Value, wv, x.Cols); err != nil {
		return nil, wrap(op, err)
	}
	return out, nil
}

// SDDMM computes per-edge values from destination features u
// (a.NumRows() x H*D) and source features v (a.NumCols() x H*D); the result
// is nnz x H:
//
//	SDDMMDot: out[e,h] = sum_d u[i,h*D+d] * v[j,h*D+d]
//	SDDMMAdd: out[e,h] = u[i,h] + v[j,h]            (D = 1)
//
// for every edge e = (i, j).
//
// Backward (Dot): du += A(de) v, dv += A^T(de) u (SpMM with de as weights);
// (Add): du += row sums of de, dv += column sums of de (EdgeSum).
func (t *Tape) SDDMM(kind backend.SDDMMOp, a backend.Sparse, u, v *Var, heads int) (*Var, error) {
	const op = "SDDMM"
	if err := t.check(op, u, v); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errf(op, "nil sparse matrix")
	}
	if heads < 1 {
		return nil, errf(op, "heads = %d, want >= 1", heads)
	}
	if u.Rows != a.NumRows() || v.Rows != a.NumCols() {
		return nil, errf(op, "u has %d rows and v %d, sparse matrix is %dx%d", u.Rows, v.Rows, a.NumRows(), a.NumCols())
	}
	if u.Cols != v.Cols || u.Cols%heads != 0 {
		return nil, errf(op, "u width %d and v width %d must agree and be a multiple of %d heads", u.Cols, v.Cols, heads)
	}
	dim := u.Cols / heads
	switch kind {
	case backend.SDDMMDot:
	case backend.SDDMMAdd:
		if dim != 1 {
			return nil, errf(op, "SDDMMAdd needs one value per head, got width %d for %d heads", u.Cols, heads)
		}
	default:
		return nil, errf(op, "unknown SDDMM op %d", kind)
	}
	out, err := t.newVar(op, a.NNZ(), heads, anyGrad(u, v))
	if err != nil {
		return nil, err
	}
	if err := t.b.SDDMM(kind, out.Value, a, u.Value, v.Value, heads, dim); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		if kind == backend.SDDMMAdd {
			if err := t.accumulate(op, u, func(dst backend.Buffer) error {
				return t.b.EdgeSum(dst, a, false, out.Grad, heads)
			}); err != nil {
				return err
			}
			return t.accumulate(op, v, func(dst backend.Buffer) error {
				return t.b.EdgeSum(dst, a, true, out.Grad, heads)
			})
		}
		if err := t.accumulate(op, u, func(dst backend.Buffer) error {
			return t.b.SpMM(dst, a, false, v.Value, out.Grad, heads, v.Cols)
		}); err != nil {
			return err
		}
		return t.accumulate(op, v, func(dst backend.Buffer) error {
			return t.b.SpMM(dst, a, true, u.Value, out.Grad, heads, u.Cols)
		})
	})
	return out, nil
}

// EdgeSoftmax normalizes per-edge scores (nnz x H) with a softmax over the
// edges of each destination row, per head.
//
// Backward: ds += y * (dy - rowsum(y*dy)).
func (t *Tape) EdgeSoftmax(a backend.Sparse, scores *Var) (*Var, error) {
	const op = "EdgeSoftmax"
	if err := t.check(op, scores); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errf(op, "nil sparse matrix")
	}
	if scores.Rows != a.NNZ() || scores.Cols < 1 {
		return nil, errf(op, "scores are %dx%d, want %d x heads", scores.Rows, scores.Cols, a.NNZ())
	}
	heads := scores.Cols
	out, err := t.newVar(op, scores.Rows, heads, scores.RequiresGrad)
	if err != nil {
		return nil, err
	}
	if err := t.b.EdgeSoftmax(out.Value, a, scores.Value, heads); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		return t.accumulate(op, scores, func(dst backend.Buffer) error {
			return t.b.EdgeSoftmaxBackward(dst, a, out.Value, out.Grad, heads)
		})
	})
	return out, nil
}

// SparseInput is a sparse input matrix (Rows x Cols) with one value per
// non-zero, e.g. bag-of-words node features: Cora's 2708 x 1433 features are
// about 1.3% non-zero, so X*W as an SpMM is ~50x cheaper than a dense Gemm.
// It is constant (no gradient flows into it).
type SparseInput struct {
	A          backend.Sparse
	Values     backend.Buffer // float32, one per non-zero, aligned with A's indices
	Rows, Cols int
}

// NewSparseInput uploads a CSR matrix with values: row i holds columns
// indices[indptr[i]:indptr[i+1]] with the corresponding values. The caller
// frees it with Free.
func NewSparseInput(b backend.Backend, rows, cols int, indptr []int64, indices []int32, values []float32) (*SparseInput, error) {
	const op = "NewSparseInput"
	if len(values) != len(indices) {
		return nil, errf(op, "%d values for %d indices", len(values), len(indices))
	}
	a, err := b.NewSparse(rows, cols, indptr, indices)
	if err != nil {
		return nil, wrap(op, err)
	}
	vals, err := b.Alloc(backend.Float32, len(values))
	if err != nil {
		b.FreeSparse(a)
		return nil, wrap(op, err)
	}
	if err := b.Upload(vals, values); err != nil {
		b.FreeSparse(a)
		b.Free(vals)
		return nil, wrap(op, err)
	}
	return &SparseInput{A: a, Values: vals, Rows: rows, Cols: cols}, nil
}

// SparseFromDense builds a SparseInput from the non-zeros of a dense
// row-major rows x cols matrix.
func SparseFromDense(b backend.Backend, rows, cols int, dense []float32) (*SparseInput, error) {
	h, err := HostSparseFromDense(rows, cols, dense)
	if err != nil {
		return nil, err
	}
	return NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values)
}

// HostSparse is a CSR matrix with values in host memory, e.g. a dataset's
// bag-of-words features, from which mini-batch inputs are gathered.
type HostSparse struct {
	Rows, Cols int
	Indptr     []int64 // Rows+1
	Indices    []int32
	Values     []float32
}

// HostSparseFromDense keeps the non-zeros of a dense row-major matrix.
func HostSparseFromDense(rows, cols int, dense []float32) (*HostSparse, error) {
	if rows < 0 || cols < 0 || cols > math.MaxInt32 || len(dense) != rows*cols {
		return nil, errf("HostSparseFromDense", "%d values for a %dx%d matrix", len(dense), rows, cols)
	}
	nnz := 0
	for _, x := range dense {
		if x != 0 {
			nnz++
		}
	}
	h := &HostSparse{Rows: rows, Cols: cols, Indptr: make([]int64, rows+1),
		Indices: make([]int32, 0, nnz), Values: make([]float32, 0, nnz)}
	for r := 0; r < rows; r++ {
		for c, x := range dense[r*cols : (r+1)*cols] {
			if x != 0 {
				h.Indices = append(h.Indices, int32(c))
				h.Values = append(h.Values, x)
			}
		}
		h.Indptr[r+1] = int64(len(h.Indices))
	}
	return h, nil
}

// Gather uploads the listed rows (e.g. a mini-batch's input nodes, in
// order) as a len(rows) x Cols SparseInput; the caller frees it.
func (h *HostSparse) Gather(b backend.Backend, rows []int32) (*SparseInput, error) {
	const op = "HostSparse.Gather"
	if h == nil || len(h.Indptr) != h.Rows+1 || len(h.Values) != len(h.Indices) {
		return nil, errf(op, "malformed host sparse matrix")
	}
	nnz := int64(0)
	for i, r := range rows {
		if r < 0 || int(r) >= h.Rows {
			return nil, errf(op, "row %d (position %d) out of range [0, %d)", r, i, h.Rows)
		}
		nnz += h.Indptr[r+1] - h.Indptr[r]
	}
	indptr := make([]int64, len(rows)+1)
	indices := make([]int32, 0, nnz)
	values := make([]float32, 0, nnz)
	for i, r := range rows {
		lo, hi := h.Indptr[r], h.Indptr[r+1]
		indices = append(indices, h.Indices[lo:hi]...)
		values = append(values, h.Values[lo:hi]...)
		indptr[i+1] = int64(len(indices))
	}
	return NewSparseInput(b, len(rows), h.Cols, indptr, indices, values)
}

// Free releases the matrix and its values (not for tape-made inputs, which
// the tape releases).
func (s *SparseInput) Free(b backend.Backend) {
	if s == nil {
		return
	}
	b.FreeSparse(s.A)
	b.Free(s.Values)
	s.A, s.Values = nil, nil
}

func (s *SparseInput) validate(op string) error {
	if s == nil || s.A == nil || s.Values == nil {
		return errf(op, "nil sparse input")
	}
	if s.A.NumRows() != s.Rows || s.A.NumCols() != s.Cols {
		return errf(op, "sparse input says %dx%d but its matrix is %dx%d", s.Rows, s.Cols, s.A.NumRows(), s.A.NumCols())
	}
	return backend.CheckLen(op, "values", s.Values, backend.Float32, s.A.NNZ())
}

// SparseDropout applies inverted dropout to the non-zero values of x (the
// zeros stay zero, so this matches dense dropout on X in distribution) and
// returns a new SparseInput sharing x's structure; its values are owned by
// the tape. p == 0 returns x.
func (t *Tape) SparseDropout(x *SparseInput, p float32, seed uint64) (*SparseInput, error) {
	const op = "SparseDropout"
	if err := t.check(op); err != nil {
		return nil, err
	}
	if err := x.validate(op); err != nil {
		return nil, err
	}
	if !(p >= 0 && p < 1) {
		return nil, errf(op, "p = %v, want 0 <= p < 1", p)
	}
	if p == 0 {
		return x, nil
	}
	vals, err := t.alloc(op, x.Values.Len())
	if err != nil {
		return nil, err
	}
	mask, err := t.alloc(op, x.Values.Len())
	if err != nil {
		return nil, err
	}
	if err := t.b.Dropout(vals, mask, x.Values, p, seed); err != nil {
		return nil, wrap(op, err)
	}
	return &SparseInput{A: x.A, Values: vals, Rows: x.Rows, Cols: x.Cols}, nil
}

// SparseMatMul returns X*W for a sparse input X (n x k) and w (k x m),
// computed as an SpMM with X's values as edge weights.
//
// Backward: dW += X^T dy (transposed SpMM).
func (t *Tape) SparseMatMul(x *SparseInput, w *Var) (*Var, error) {
	const op = "SparseMatMul"
	if err := x.validate(op); err != nil {
		return nil, err
	}
	if err := t.check(op, w); err != nil {
		return nil, err
	}
	if w.Rows != x.Cols {
		return nil, errf(op, "inner dimensions differ: %dx%d * %dx%d", x.Rows, x.Cols, w.Rows, w.Cols)
	}
	out, err := t.newVar(op, x.Rows, w.Cols, w.RequiresGrad)
	if err != nil {
		return nil, err
	}
	if err := t.b.SpMM(out.Value, x.A, false, w.Value, x.Values, 1, w.Cols); err != nil {
		return nil, wrap(op, err)
	}
	t.record(op, out, func() error {
		return t.accumulate(op, w, func(dst backend.Buffer) error {
			return t.b.SpMM(dst, x.A, true, out.Grad, x.Values, 1, w.Cols)
		})
	})
	return out, nil
}
