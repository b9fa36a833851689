package backendtest

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// testDeterminism runs each primitive whose result could depend on
// summation order twice (and, with VaryGOMAXPROCS, under several
// GOMAXPROCS values) on inputs large enough to be split, and requires
// identical bits every time.
func testDeterminism(s *suite) {
	const rows, cols, width, heads = 3000, 2000, 32, 4
	a := s.randCSR(rows, cols, 24)
	// A hub column that many rows point to: its transposed sum is long.
	for e := 0; e < a.nnz(); e += 3 {
		a.idx[e] = 7
	}
	sp := s.sparse(a)
	xr, xc := s.f32(s.randn(rows*width)), s.f32(s.randn(cols*width))
	w := s.f32(s.randn(a.nnz() * heads))
	e1 := s.f32(s.randn(a.nnz() * heads))
	idx := make([]int32, 20000)
	for i := range idx {
		idx[i] = int32(s.r.IntN(50)) // many duplicates per destination
	}
	ib := s.i32(idx)
	src := s.f32(s.randn(len(idx) * width))
	ga, gb := s.f32(s.randn(500*256)), s.f32(s.randn(256*192))
	big := s.f32(s.randn(200000))
	labels := make([]int32, rows)
	rowsIdx := make([]int32, rows)
	for i := range labels {
		labels[i] = int32(s.r.IntN(width))
		rowsIdx[i] = int32(i)
	}
	lb, rb := s.i32(labels), s.i32(rowsIdx)

	type run struct {
		name string
		n    int
		fn   func(out backend.Buffer) (float64, error)
	}
	runs := []run{
		{"Gemm", 500 * 192, func(o backend.Buffer) (float64, error) {
			return 0, s.b.Gemm(false, false, 500, 192, 256, 1, ga, gb, 0, o)
		}},
		{"GemmTN", 256 * 256, func(o backend.Buffer) (float64, error) {
			return 0, s.b.Gemm(true, false, 256, 256, 500, 1, ga, ga, 0, o)
		}},
		{"SpMM", rows * width, func(o backend.Buffer) (float64, error) {
			return 0, s.b.SpMM(o, sp, false, xc, w, heads, width)
		}},
		{"SpMM^T", cols * width, func(o backend.Buffer) (float64, error) {
			return 0, s.b.SpMM(o, sp, true, xr, w, heads, width)
		}},
		{"SpMM^T unweighted", cols * width, func(o backend.Buffer) (float64, error) {
			return 0, s.b.SpMM(o, sp, true, xr, nil, 1, width)
		}},
		{"SDDMM", a.nnz() * heads, func(o backend.Buffer) (float64, error) {
			return 0, s.b.SDDMM(backend.SDDMMDot, o, sp, xr, xc, heads, width/heads)
		}},
		{"EdgeSum^T", cols * heads, func(o backend.Buffer) (float64, error) {
			return 0, s.b.EdgeSum(o, sp, true, e1, heads)
		}},
		{"EdgeSoftmax", a.nnz() * heads, func(o backend.Buffer) (float64, error) {
			return 0, s.b.EdgeSoftmax(o, sp, e1, heads)
		}},
		{"ScatterAddRows", 50 * width, func(o backend.Buffer) (float64, error) {
			if err := s.b.Fill(o, 0); err != nil {
				return 0, err
			}
			return 0, s.b.ScatterAddRows(o, src, ib, 50, width)
		}},
		{"SumRows", width, func(o backend.Buffer) (float64, error) {
			return 0, s.b.SumRows(o, src, len(idx), width)
		}},
		{"Sum", 0, func(backend.Buffer) (float64, error) { return s.b.Sum(big) }},
		{"LogSoftmax", rows * width, func(o backend.Buffer) (float64, error) {
			return 0, s.b.LogSoftmax(o, xr, rows, width)
		}},
		{"NLLLoss", 0, func(backend.Buffer) (float64, error) {
			return s.b.NLLLoss(xr, rb, lb, rows, width)
		}},
		{"Dropout", rows * width, func(o backend.Buffer) (float64, error) {
			return 0, s.b.Dropout(o, s.out(rows*width), xr, 0.3, 99)
		}},
	}
	for _, r := range runs {
		var ref []float32
		var refS float64
		first := true
		s.withProcs(func(procs int) {
			for rep := 0; rep < 2; rep++ {
				o := s.out(r.n)
				var sum float64
				s.ok(r.name, func() (err error) { sum, err = r.fn(o); return err })
				got := s.get(o)
				what := fmt.Sprintf("%s (GOMAXPROCS %d, run %d)", r.name, procs, rep+1)
				if first {
					ref, refS, first = got, sum, false
					continue
				}
				s.exact(what+" differs from the first run", got, ref)
				if math.Float64bits(sum) != math.Float64bits(refS) {
					s.t.Fatalf("%s: result %v differs from the first run's %v", what, sum, refS)
				}
			}
		})
	}
}
