package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Sparse is a CSR matrix held on the host. Its transpose (CSC) is built on
// first use, once, and cached; it lists, per column, the rows and original
// edge ids in increasing edge order, so transposed products sum in the same
// order as a serial scatter would.
type Sparse struct {
	rows, cols int
	indptr     []int64
	indices    []int32

	tOnce   sync.Once
	tIndptr []int64 // cols+1
	tRows   []int32 // nnz: row of each transposed entry
	tEdges  []int64 // nnz: original edge id of each transposed entry
}

var _ backend.Sparse = (*Sparse)(nil)

// NumRows returns the number of rows.
func (s *Sparse) NumRows() int { return s.rows }

// NumCols returns the number of columns.
func (s *Sparse) NumCols() int { return s.cols }

// NNZ returns the number of stored entries.
func (s *Sparse) NNZ() int { return len(s.indices) }

// Indptr returns the row pointers (shared; do not modify).
func (s *Sparse) Indptr() []int64 { return s.indptr }

// Indices returns the column indices (shared; do not modify).
func (s *Sparse) Indices() []int32 { return s.indices }

// transpose builds the cached CSC view.
func (s *Sparse) transpose() {
	s.tOnce.Do(func() {
		nnz := len(s.indices)
		ptr := make([]int64, s.cols+1)
		for _, j := range s.indices {
			ptr[j+1]++
		}
		for j := 0; j < s.cols; j++ {
			ptr[j+1] += ptr[j]
		}
		next := make([]int64, s.cols)
		copy(next, ptr[:s.cols])
		trows := make([]int32, nnz)
		tedges := make([]int64, nnz)
		for i := 0; i < s.rows; i++ {
			for e := s.indptr[i]; e < s.indptr[i+1]; e++ {
				j := s.indices[e]
				p := next[j]
				next[j]++
				trows[p] = int32(i)
				tedges[p] = e
			}
		}
		s.tIndptr, s.tRows, s.tEdges = ptr, trows, tedges
	})
}

// NewSparse copies and validates a CSR matrix.
func (b *Backend) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	if err := backend.CheckCSR("NewSparse", rows, cols, indptr, indices); err != nil {
		return nil, err
	}
	return &Sparse{
		rows:    rows,
		cols:    cols,
		indptr:  append([]int64(nil), indptr...),
		indices: append([]int32(nil), indices...),
	}, nil
}

// AdoptSparse validates a CSR matrix as NewSparse does and keeps the
// slices themselves (backend.SparseAdopter): the caller hands them over.
func (b *Backend) AdoptSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	if err := backend.CheckCSR("AdoptSparse", rows, cols, indptr, indices); err != nil {
		return nil, err
	}
	return &Sparse{rows: rows, cols: cols, indptr: indptr, indices: indices}, nil
}

var _ backend.SparseAdopter = (*Backend)(nil)

// FreeSparse drops a's storage.
func (b *Backend) FreeSparse(a backend.Sparse) {
	if s, ok := a.(*Sparse); ok && s != nil {
		s.tOnce.Do(func() {}) // a freed matrix never builds its transpose
		s.rows, s.cols = 0, 0
		s.indptr, s.indices = []int64{0}, nil
		s.tIndptr, s.tRows, s.tEdges = []int64{0}, nil, nil
	}
}

func asSparse(op string, a backend.Sparse) (*Sparse, error) {
	s, ok := a.(*Sparse)
	if !ok || s == nil {
		return nil, &backend.ShapeError{Op: op, Msg: fmt.Sprintf("a is %T, not a cpu Sparse", a)}
	}
	return s, nil
}

// csr is one orientation of a sparse matrix: entry p of row r has column
// col[p] and edge id edge(p) (p itself for the CSR, tEdges[p] for the CSC).
type csr struct {
	ptr   []int64
	col   []int32
	edges []int64 // nil: edge id is the position
	rows  int
	cols  int
}

func (c csr) edge(p int64) int64 {
	if c.edges == nil {
		return p
	}
	return c.edges[p]
}

func (s *Sparse) view(transpose bool) csr {
	if !transpose {
		return csr{ptr: s.indptr, col: s.indices, rows: s.rows, cols: s.cols}
	}
	s.transpose()
	return csr{ptr: s.tIndptr, col: s.tRows, edges: s.tEdges, rows: s.cols, cols: s.rows}
}

// parRows runs fn over the rows of c in parallel, in chunks of roughly
// equal work (entries*width + rows).
func parRows(c csr, width int, fn func(lo, hi int)) {
	nnz := c.ptr[c.rows]
	avg := max(1, int(nnz/int64(max(c.rows, 1))))
	parFor(c.rows, rowGrain(width*avg+1), fn)
}

// SpMM computes out = A x (or A^T x) with optional per-edge, per-head
// weights.
func (b *Backend) SpMM(out backend.Buffer, a backend.Sparse, transpose bool, x backend.Buffer, w backend.Buffer, heads, width int) error {
	const op = "SpMM"
	if isBF16(out, x) {
		return b.spmmBF16(out, a, transpose, x, w, heads, width)
	}
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	rows, cols := s.rows, s.cols
	if transpose {
		rows, cols = cols, rows
	}
	on, xn, err := backend.SpMMShape(op, rows, cols, heads, width, w != nil)
	if err != nil {
		return err
	}
	ov, err := f32(op, "out", out, on)
	if err != nil {
		return err
	}
	xv, err := f32(op, "x", x, xn)
	if err != nil {
		return err
	}
	var wv []float32
	if w != nil {
		wn, err := backend.Dims(op, s.NNZ(), heads)
		if err != nil {
			return err
		}
		if wv, err = f32(op, "w", w, wn); err != nil {
			return err
		}
	}
	dim := width / heads
	c := s.view(transpose)
	parRows(c, width, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			or := ov[r*width : (r+1)*width]
			clear(or)
			for p := c.ptr[r]; p < c.ptr[r+1]; p++ {
				j := int(c.col[p])
				xr := xv[j*width : (j+1)*width]
				if wv == nil {
					addTo(or, xr)
					continue
				}
				e := c.edge(p)
				for h := 0; h < heads; h++ {
					axpy(or[h*dim:(h+1)*dim], wv[e*int64(heads)+int64(h)], xr[h*dim:(h+1)*dim])
				}
			}
		}
	})
	return nil
}

// SDDMM computes per-edge values from destination features u and source
// features v.
func (b *Backend) SDDMM(sop backend.SDDMMOp, out backend.Buffer, a backend.Sparse, u, v backend.Buffer, heads, dim int) error {
	const op = "SDDMM"
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	un, vn, en, err := backend.SDDMMShape(op, sop, s.rows, s.cols, s.NNZ(), heads, dim)
	if err != nil {
		return err
	}
	ov, err := f32(op, "out", out, en)
	if err != nil {
		return err
	}
	uv, err := f32(op, "u", u, un)
	if err != nil {
		return err
	}
	vv, err := f32(op, "v", v, vn)
	if err != nil {
		return err
	}
	width := heads * dim // bounded by SDDMMShape
	c := s.view(false)
	parRows(c, width, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ur := uv[i*width : (i+1)*width]
			for e := c.ptr[i]; e < c.ptr[i+1]; e++ {
				j := int(c.col[e])
				vr := vv[j*width : (j+1)*width]
				oe := ov[e*int64(heads) : (e+1)*int64(heads)]
				if sop == backend.SDDMMAdd {
					for h := range oe {
						oe[h] = ur[h] + vr[h]
					}
					continue
				}
				for h := range oe {
					oe[h] = dot(ur[h*dim:(h+1)*dim], vr[h*dim:(h+1)*dim])
				}
			}
		}
	})
	return nil
}

// EdgeSum reduces per-edge values to rows (or columns when transpose).
func (b *Backend) EdgeSum(out backend.Buffer, a backend.Sparse, transpose bool, e backend.Buffer, heads int) error {
	const op = "EdgeSum"
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	rows := s.rows
	if transpose {
		rows = s.cols
	}
	on, en, err := backend.EdgeSumShape(op, rows, s.NNZ(), heads)
	if err != nil {
		return err
	}
	ov, err := f32(op, "out", out, on)
	if err != nil {
		return err
	}
	ev, err := f32(op, "e", e, en)
	if err != nil {
		return err
	}
	c := s.view(transpose)
	parRows(c, heads, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			or := ov[r*heads : (r+1)*heads]
			clear(or)
			for p := c.ptr[r]; p < c.ptr[r+1]; p++ {
				ed := c.edge(p)
				addTo(or, ev[ed*int64(heads):(ed+1)*int64(heads)])
			}
		}
	})
	return nil
}

// edgeArgs validates an (nnz x heads) edge-value op and returns a.
func edgeArgs(op string, a backend.Sparse, heads int) (*Sparse, int, error) {
	s, err := asSparse(op, a)
	if err != nil {
		return nil, 0, err
	}
	n, err := backend.EdgeShape(op, s.NNZ(), heads)
	return s, n, err
}

// EdgeSoftmax normalizes scores over each row's edges, per head.
func (b *Backend) EdgeSoftmax(out backend.Buffer, a backend.Sparse, scores backend.Buffer, heads int) error {
	const op = "EdgeSoftmax"
	s, n, err := edgeArgs(op, a, heads)
	if err != nil {
		return err
	}
	ov, err := f32(op, "out", out, n)
	if err != nil {
		return err
	}
	sv, err := f32(op, "scores", scores, n)
	if err != nil {
		return err
	}
	c := s.view(false)
	H := int64(heads)
	parRows(c, heads, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			e0, e1 := c.ptr[r], c.ptr[r+1]
			if e0 == e1 {
				continue
			}
			for h := int64(0); h < H; h++ {
				m := sv[e0*H+h]
				for e := e0; e < e1; e++ {
					m = max(m, sv[e*H+h])
				}
				var sum float64
				for e := e0; e < e1; e++ {
					x := math.Exp(float64(sv[e*H+h] - m))
					ov[e*H+h] = float32(x)
					sum += x
				}
				inv := 1 / sum
				for e := e0; e < e1; e++ {
					ov[e*H+h] = float32(float64(ov[e*H+h]) * inv)
				}
			}
		}
	})
	return nil
}

// EdgeSoftmaxBackward computes ds = y * (dy - rowsum(y*dy)) per row, head.
func (b *Backend) EdgeSoftmaxBackward(ds backend.Buffer, a backend.Sparse, y, dy backend.Buffer, heads int) error {
	const op = "EdgeSoftmaxBackward"
	s, n, err := edgeArgs(op, a, heads)
	if err != nil {
		return err
	}
	dv, err := f32(op, "ds", ds, n)
	if err != nil {
		return err
	}
	yv, err := f32(op, "y", y, n)
	if err != nil {
		return err
	}
	gv, err := f32(op, "dy", dy, n)
	if err != nil {
		return err
	}
	c := s.view(false)
	H := int64(heads)
	parRows(c, heads, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			e0, e1 := c.ptr[r], c.ptr[r+1]
			for h := int64(0); h < H; h++ {
				var dot float64
				for e := e0; e < e1; e++ {
					dot += float64(yv[e*H+h]) * float64(gv[e*H+h])
				}
				for e := e0; e < e1; e++ {
					k := e*H + h
					dv[k] = float32(float64(yv[k]) * (float64(gv[k]) - dot))
				}
			}
		}
	})
	return nil
}

// RowDegreeInv writes 1/max(deg, 1) per row (or column when transpose).
func (b *Backend) RowDegreeInv(out backend.Buffer, a backend.Sparse, transpose bool) error {
	const op = "RowDegreeInv"
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	c := s.view(transpose)
	ov, err := f32(op, "out", out, c.rows)
	if err != nil {
		return err
	}
	parFor(c.rows, grainElem, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			ov[r] = 1 / float32(max(c.ptr[r+1]-c.ptr[r], 1))
		}
	})
	return nil
}

// ExpandRowsToEdges writes out[e] = v[row(e)].
func (b *Backend) ExpandRowsToEdges(out backend.Buffer, a backend.Sparse, v backend.Buffer) error {
	const op = "ExpandRowsToEdges"
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	ov, err := f32(op, "out", out, s.NNZ())
	if err != nil {
		return err
	}
	vv, err := f32(op, "v", v, s.rows)
	if err != nil {
		return err
	}
	c := s.view(false)
	parRows(c, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x := vv[r]
			for e := c.ptr[r]; e < c.ptr[r+1]; e++ {
				ov[e] = x
			}
		}
	})
	return nil
}

var _ backend.ConcatAggregator = (*Backend)(nil)

// SpMMConcat writes [x's first rows | A x] (backend.ConcatAggregator):
// SpMM's sums, then each row's two halves put side by side.
func (b *Backend) SpMMConcat(out backend.Buffer, a backend.Sparse, x, w backend.Buffer, width int) error {
	const op = "SpMMConcat"
	s, err := asSparse(op, a)
	if err != nil {
		return err
	}
	on, xn, err := backend.SpMMConcatShape(op, s.rows, s.cols, width)
	if err != nil {
		return err
	}
	ob, err := float(op, "out", out, on)
	if err != nil {
		return err
	}
	xb, err := asBuf(op, "x", x, ob.dt, xn)
	if err != nil {
		return err
	}
	agg, err := b.Alloc(ob.dt, s.rows*width)
	if err != nil {
		return err
	}
	defer b.Free(agg)
	if err := b.SpMM(agg, a, false, x, w, 1, width); err != nil {
		return err
	}
	ab := agg.(*Buffer)
	parFor(s.rows, rowGrain(2*width), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o := i * 2 * width
			if ob.dt == backend.BFloat16 {
				copy(ob.u16[o:o+width], xb.u16[i*width:(i+1)*width])
				copy(ob.u16[o+width:o+2*width], ab.u16[i*width:(i+1)*width])
				continue
			}
			copy(ob.f32[o:o+width], xb.f32[i*width:(i+1)*width])
			copy(ob.f32[o+width:o+2*width], ab.f32[i*width:(i+1)*width])
		}
	})
	return nil
}
