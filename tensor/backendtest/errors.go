package backendtest

import (
	"math"

	"github.com/strata-gnn/strata/tensor/backend"
)

// testErrors checks that bad arguments give typed errors, never panics,
// and leave the back end usable.
func testErrors(s *suite) {
	b := s.b
	f4, f6, f12 := s.f32(s.randn(4)), s.f32(s.randn(6)), s.f32(s.randn(12))
	i4 := s.i32([]int32{0, 1, 2, 1})
	shapeErr := s.expectShapeErr
	idxErr := s.expectIndexErr

	// memory
	shapeErr("Alloc negative", func() error { _, err := b.Alloc(backend.Float32, -1); return err })
	shapeErr("Alloc bad dtype", func() error { _, err := b.Alloc(backend.DType(99), 4); return err })
	shapeErr("Upload short", func() error { return b.Upload(f4, make([]float32, 3)) })
	shapeErr("Upload dtype", func() error { return b.Upload(f4, make([]int32, 4)) })
	shapeErr("Upload type", func() error { return b.Upload(f4, "four") })
	shapeErr("Upload nil dst", func() error { return b.Upload(nil, make([]float32, 4)) })
	shapeErr("Download long", func() error { return b.Download(make([]float32, 5), f4) })
	shapeErr("Download dtype", func() error { return b.Download(make([]int64, 4), f4) })
	shapeErr("Copy len", func() error { return b.Copy(f4, f6) })
	shapeErr("Copy dtype", func() error { return b.Copy(f4, i4) })
	shapeErr("Copy nil", func() error { return b.Copy(f4, nil) })
	shapeErr("Fill int32", func() error { return b.Fill(i4, 1) })

	// dense
	shapeErr("Gemm a", func() error { return b.Gemm(false, false, 2, 2, 3, 1, f4, f6, 0, f4) })
	shapeErr("Gemm c", func() error { return b.Gemm(false, false, 2, 3, 2, 1, f4, f6, 0, f4) })
	shapeErr("Gemm negative", func() error { return b.Gemm(false, false, -2, -2, 1, 1, f4, f6, 0, f4) })
	shapeErr("Gemm dtype", func() error { return b.Gemm(false, false, 2, 2, 2, 1, i4, f4, 0, f4) })
	shapeErr("Gemm nil", func() error { return b.Gemm(false, false, 2, 2, 2, 1, nil, f4, 0, f4) })
	shapeErr("Gemm overflow", func() error { return b.Gemm(false, false, math.MaxInt/2, 4, 4, 1, f4, f4, 0, f4) })

	// elementwise
	shapeErr("Axpby", func() error { return b.Axpby(f4, 1, f6, 1, f4) })
	shapeErr("Mul", func() error { return b.Mul(f4, f4, f6) })
	shapeErr("Mul dtype", func() error { return b.Mul(f4, f4, i4) })
	shapeErr("AddRowVector v", func() error { return b.AddRowVector(f6, f6, f6, 2, 3) })
	shapeErr("AddRowVector x", func() error { return b.AddRowVector(f6, f4, s.f32(s.randn(3)), 2, 3) })
	shapeErr("Unary op", func() error { return b.Unary(backend.UnaryOp(0), 0, f4, f4) })
	shapeErr("Unary len", func() error { return b.Unary(backend.ReLU, 0, f4, f6) })
	shapeErr("UnaryBackward len", func() error { return b.UnaryBackward(backend.ReLU, 0, f4, f4, f4, f6) })
	shapeErr("UnaryBackward op", func() error { return b.UnaryBackward(backend.UnaryOp(77), 0, f4, f4, f4, f4) })
	shapeErr("Dropout p=1", func() error { return b.Dropout(f4, s.out(4), f4, 1, 1) })
	shapeErr("Dropout p<0", func() error { return b.Dropout(f4, s.out(4), f4, -0.1, 1) })
	shapeErr("Dropout p=NaN", func() error { return b.Dropout(f4, s.out(4), f4, float32(math.NaN()), 1) })
	shapeErr("Dropout mask", func() error { return b.Dropout(f4, f6, f4, 0.5, 1) })

	// reductions
	shapeErr("SumRows dst", func() error { return b.SumRows(f4, f6, 2, 3) })
	shapeErr("SumRows x", func() error { return b.SumRows(s.out(3), f4, 2, 3) })
	shapeErr("Sum int32", func() error { _, err := b.Sum(i4); return err })
	shapeErr("Sum nil", func() error { _, err := b.Sum(nil); return err })
	shapeErr("ArgmaxRows dtype", func() error { return b.ArgmaxRows(f4, f12, 4, 3) })
	shapeErr("ArgmaxRows len", func() error { return b.ArgmaxRows(i4, f12, 3, 4) })
	shapeErr("ArgmaxRows cols 0", func() error { return b.ArgmaxRows(i4, s.f32(nil), 4, 0) })
	shapeErr("LogSoftmax", func() error { return b.LogSoftmax(f4, f6, 2, 2) })
	shapeErr("LogSoftmaxBackward", func() error { return b.LogSoftmaxBackward(f4, f4, f6, 2, 2) })

	// loss
	rows2, lab2 := s.i32([]int32{0, 1}), s.i32([]int32{1, 2})
	shapeErr("NLLLoss logp", func() error { _, err := b.NLLLoss(f4, rows2, lab2, 2, 3); return err })
	shapeErr("NLLLoss labels len", func() error { _, err := b.NLLLoss(f6, rows2, i4, 2, 3); return err })
	shapeErr("NLLLoss dtype", func() error { _, err := b.NLLLoss(f6, f4, i4, 2, 3); return err })
	idxErr("NLLLoss label", func() error { _, err := b.NLLLoss(f6, rows2, s.i32([]int32{1, 3}), 2, 3); return err })
	idxErr("NLLLoss negative label", func() error { _, err := b.NLLLoss(f6, rows2, s.i32([]int32{-1, 0}), 2, 3); return err })
	idxErr("NLLLoss row", func() error { _, err := b.NLLLoss(f6, s.i32([]int32{2, 0}), lab2, 2, 3); return err })
	shapeErr("NLLLossBackward dlogp", func() error { return b.NLLLossBackward(f4, rows2, lab2, 2, 3, 1) })
	idxErr("NLLLossBackward label", func() error { return b.NLLLossBackward(f6, rows2, s.i32([]int32{0, 3}), 2, 3, 1) })
	idxErr("NLLLossBackward row", func() error { return b.NLLLossBackward(f6, s.i32([]int32{0, -5}), lab2, 2, 3, 1) })

	// indexing
	shapeErr("GatherRows dst", func() error { return b.GatherRows(f6, f6, rows2, 3, 2) })
	shapeErr("GatherRows idx dtype", func() error { return b.GatherRows(f4, f6, f4, 3, 2) })
	idxErr("GatherRows idx", func() error { return b.GatherRows(f4, f6, s.i32([]int32{0, 3}), 3, 2) })
	idxErr("GatherRows negative", func() error { return b.GatherRows(f4, f6, s.i32([]int32{-1, 0}), 3, 2) })
	shapeErr("ScatterAddRows src", func() error { return b.ScatterAddRows(f6, f6, rows2, 3, 2) })
	idxErr("ScatterAddRows idx", func() error { return b.ScatterAddRows(f6, f4, s.i32([]int32{3, 0}), 3, 2) })
	idxErr("ScatterAddRows negative", func() error { return b.ScatterAddRows(f6, f4, s.i32([]int32{0, -1}), 3, 2) })

	// sparse construction
	newSp := func(rows, cols int, ptr []int64, idx []int32) func() error {
		return func() error {
			sp, err := b.NewSparse(rows, cols, ptr, idx)
			if err == nil {
				b.FreeSparse(sp)
			}
			return err
		}
	}
	shapeErr("NewSparse indptr len", newSp(2, 2, []int64{0, 1}, []int32{0}))
	shapeErr("NewSparse indptr[0]", newSp(2, 2, []int64{1, 1, 2}, []int32{0, 1}))
	shapeErr("NewSparse decreasing", newSp(2, 2, []int64{0, 2, 1}, []int32{0}))
	shapeErr("NewSparse nnz", newSp(2, 2, []int64{0, 1, 2}, []int32{0}))
	shapeErr("NewSparse negative", newSp(-1, 2, []int64{}, nil))
	shapeErr("NewSparse nil indptr", newSp(0, 2, nil, nil))
	idxErr("NewSparse index", newSp(2, 2, []int64{0, 1, 2}, []int32{0, 2}))
	idxErr("NewSparse negative index", newSp(2, 2, []int64{0, 1, 2}, []int32{-1, 0}))

	// sparse ops on a 2 x 3 matrix with 4 edges
	a := s.sparse(csrM{rows: 2, cols: 3, ptr: []int64{0, 3, 4}, idx: []int32{0, 2, 2, 1}})
	f3, f8 := s.f32(s.randn(3)), s.f32(s.randn(8))
	shapeErr("SpMM nil w heads", func() error { return b.SpMM(f4, a, false, f6, nil, 2, 2) })
	shapeErr("SpMM width", func() error { return b.SpMM(f6, a, false, s.f32(s.randn(9)), f8, 2, 3) })
	shapeErr("SpMM heads 0", func() error { return b.SpMM(f4, a, false, f6, f4, 0, 2) })
	shapeErr("SpMM x", func() error { return b.SpMM(f4, a, false, f4, nil, 1, 2) })
	shapeErr("SpMM out transposed", func() error { return b.SpMM(f4, a, true, f4, nil, 1, 2) })
	shapeErr("SpMM w", func() error { return b.SpMM(f4, a, false, f6, f6, 1, 2) })
	shapeErr("SpMM nil sparse", func() error { return b.SpMM(f4, nil, false, f6, nil, 1, 2) })
	shapeErr("SDDMM add dim", func() error { return b.SDDMM(backend.SDDMMAdd, f4, a, f4, f6, 1, 2) })
	shapeErr("SDDMM op", func() error { return b.SDDMM(backend.SDDMMOp(9), f4, a, f4, f6, 1, 2) })
	shapeErr("SDDMM u", func() error { return b.SDDMM(backend.SDDMMDot, f4, a, f6, f6, 1, 2) })
	shapeErr("SDDMM out", func() error { return b.SDDMM(backend.SDDMMDot, f6, a, f4, f6, 1, 2) })
	shapeErr("EdgeSum out", func() error { return b.EdgeSum(f4, a, false, f4, 1) })
	shapeErr("EdgeSum transposed out", func() error { return b.EdgeSum(s.f32(s.randn(2)), a, true, f4, 1) })
	shapeErr("EdgeSum heads", func() error { return b.EdgeSum(f4, a, false, f8, 0) })
	shapeErr("EdgeSoftmax", func() error { return b.EdgeSoftmax(f4, a, f6, 1) })
	shapeErr("EdgeSoftmax heads", func() error { return b.EdgeSoftmax(f4, a, f4, 0) })
	shapeErr("EdgeSoftmaxBackward", func() error { return b.EdgeSoftmaxBackward(f4, a, f4, f8, 1) })
	shapeErr("RowDegreeInv", func() error { return b.RowDegreeInv(f3, a, false) })
	shapeErr("RowDegreeInv transposed", func() error { return b.RowDegreeInv(s.f32(s.randn(2)), a, true) })
	shapeErr("ExpandRowsToEdges", func() error { return b.ExpandRowsToEdges(f4, a, f3) })

	// optimizer
	shapeErr("AdamStep t=0", func() error { return b.AdamStep(f4, f4, s.out(4), s.out(4), 0.1, 0.9, 0.999, 1e-8, 0, 0) })
	shapeErr("AdamStep beta1=1", func() error { return b.AdamStep(f4, f4, s.out(4), s.out(4), 0.1, 1, 0.999, 1e-8, 0, 1) })
	shapeErr("AdamStep len", func() error { return b.AdamStep(f4, f4, f6, f4, 0.1, 0.9, 0.999, 1e-8, 0, 1) })

	// After all that, the back end still computes.
	x := s.randn(6)
	y := s.out(6)
	s.ok("Axpby", func() error { return b.Axpby(y, 2, s.f32(x), 0, s.f32(x)) })
	want := make([]float64, 6)
	for i, v := range x {
		want[i] = 2 * float64(v)
	}
	s.close("Axpby after errors", s.get(y), want, s.opt.Tol)
}
