package backendtest

import (
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Float64 reference implementations: plain loops, written for clarity.

func refGemm(transA, transB bool, m, n, k int, alpha float64, a, b []float32, beta float64, c []float32) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var sum float64
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if transA {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if transB {
					bv = b[j*k+p]
				}
				sum += float64(av) * float64(bv)
			}
			v := alpha * sum
			if beta != 0 {
				v += beta * float64(c[i*n+j])
			}
			out[i*n+j] = v
		}
	}
	return out
}

func refUnary(op backend.UnaryOp, alpha, x float64) float64 {
	switch op {
	case backend.ReLU:
		return math.Max(x, 0)
	case backend.LeakyReLU:
		if x > 0 {
			return x
		}
		return alpha * x
	case backend.ELU:
		if x > 0 {
			return x
		}
		return alpha * math.Expm1(x)
	case backend.Exp:
		return math.Exp(x)
	}
	return x
}

func refUnaryGrad(op backend.UnaryOp, alpha, x float64) float64 {
	switch op {
	case backend.ReLU:
		if x > 0 {
			return 1
		}
		return 0
	case backend.LeakyReLU:
		if x > 0 {
			return 1
		}
		return alpha
	case backend.ELU:
		if x > 0 {
			return 1
		}
		return alpha * math.Exp(x)
	case backend.Exp:
		return math.Exp(x)
	}
	return 1
}

func refLogSoftmax(x []float64, rows, cols int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for c, v := range row {
			out[r*cols+c] = v - m - math.Log(s)
		}
	}
	return out
}

// csrM is a host CSR matrix for building test cases.
type csrM struct {
	rows, cols int
	ptr        []int64
	idx        []int32
}

func (a csrM) nnz() int { return len(a.idx) }

// rowOf returns the row of every edge.
func (a csrM) rowOf() []int {
	r := make([]int, a.nnz())
	for i := 0; i < a.rows; i++ {
		for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
			r[e] = i
		}
	}
	return r
}

// randCSR draws a rows x cols matrix with degrees in [0, maxDeg], about a
// quarter of the rows empty, and repeated columns allowed (multi-edges).
func (s *suite) randCSR(rows, cols, maxDeg int) csrM {
	a := csrM{rows: rows, cols: cols, ptr: make([]int64, rows+1)}
	for i := 0; i < rows; i++ {
		deg := 0
		if cols > 0 && s.r.IntN(4) != 0 {
			deg = s.r.IntN(maxDeg + 1)
		}
		for d := 0; d < deg; d++ {
			a.idx = append(a.idx, int32(s.r.IntN(cols)))
		}
		if deg >= 2 && s.r.IntN(3) == 0 {
			a.idx[len(a.idx)-1] = a.idx[len(a.idx)-2] // a repeated edge
		}
		a.ptr[i+1] = int64(len(a.idx))
	}
	return a
}

// sparse uploads a.
func (s *suite) sparse(a csrM) backend.Sparse {
	s.t.Helper()
	var sp backend.Sparse
	s.ok("NewSparse", func() (err error) {
		sp, err = s.b.NewSparse(a.rows, a.cols, a.ptr, a.idx)
		return err
	})
	if sp.NumRows() != a.rows || sp.NumCols() != a.cols || sp.NNZ() != a.nnz() {
		s.t.Fatalf("NewSparse: got %dx%d with %d nnz, want %dx%d with %d", sp.NumRows(), sp.NumCols(), sp.NNZ(), a.rows, a.cols, a.nnz())
	}
	s.t.Cleanup(func() { s.b.FreeSparse(sp) })
	return sp
}

// refSpMM: out = A x (or A^T x), x has width = heads*dim columns, w is
// nnz x heads or nil.
func refSpMM(a csrM, transpose bool, x []float32, w []float32, heads, width int) []float64 {
	dim := width / heads
	outRows := a.rows
	if transpose {
		outRows = a.cols
	}
	out := make([]float64, outRows*width)
	rowOf := a.rowOf()
	for e := 0; e < a.nnz(); e++ {
		dst, src := rowOf[e], int(a.idx[e])
		if transpose {
			dst, src = src, dst
		}
		for h := 0; h < heads; h++ {
			wv := 1.0
			if w != nil {
				wv = float64(w[e*heads+h])
			}
			for d := 0; d < dim; d++ {
				out[dst*width+h*dim+d] += wv * float64(x[src*width+h*dim+d])
			}
		}
	}
	return out
}

func refEdgeSoftmax(a csrM, scores []float64, heads int) []float64 {
	out := make([]float64, len(scores))
	for i := 0; i < a.rows; i++ {
		for h := 0; h < heads; h++ {
			m := math.Inf(-1)
			for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
				m = math.Max(m, scores[int(e)*heads+h])
			}
			var sum float64
			for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
				sum += math.Exp(scores[int(e)*heads+h] - m)
			}
			for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
				out[int(e)*heads+h] = math.Exp(scores[int(e)*heads+h]-m) / sum
			}
		}
	}
	return out
}

func dot64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
