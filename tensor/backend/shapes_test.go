package backend

import (
	"errors"
	"math"
	"testing"
)

func wantShapeErr(t *testing.T, err error, msg string) {
	t.Helper()
	var se *ShapeError
	if !errors.As(err, &se) || se.Msg != msg {
		t.Fatalf("err = %v, want ShapeError %q", err, msg)
	}
}

func TestDims(t *testing.T) {
	if n, err := Dims("op", 3, 4); err != nil || n != 12 {
		t.Fatalf("Dims(3, 4) = %d, %v", n, err)
	}
	_, err := Dims("op", -1, 4)
	wantShapeErr(t, err, "negative shape -1 x 4")
	_, err = Dims("op", MaxElems, 2)
	wantShapeErr(t, err, "shape 1125899906842624 x 2 too large")
}

func TestSDDMMShape(t *testing.T) {
	u, v, e, err := SDDMMShape("SDDMM", SDDMMDot, 3, 5, 7, 2, 4)
	if err != nil || u != 24 || v != 40 || e != 14 {
		t.Fatalf("SDDMMShape = %d, %d, %d, %v; want 24, 40, 14", u, v, e, err)
	}
	_, _, _, err = SDDMMShape("SDDMM", SDDMMAdd, 3, 5, 7, 2, 4)
	wantShapeErr(t, err, "SDDMMAdd needs dim 1, got 4")
	_, _, _, err = SDDMMShape("SDDMM", SDDMMDot, 3, 5, 7, 0, 4)
	wantShapeErr(t, err, "heads 0, dim 4: want heads >= 1, dim >= 0")
}

func TestSpMMAndEdgeShapes(t *testing.T) {
	o, x, err := SpMMShape("SpMM", 3, 5, 2, 8, true)
	if err != nil || o != 24 || x != 40 {
		t.Fatalf("SpMMShape = %d, %d, %v; want 24, 40", o, x, err)
	}
	_, _, err = SpMMShape("SpMM", 3, 5, 2, 8, false)
	wantShapeErr(t, err, "w is nil but heads = 2, want 1")
	_, _, err = SpMMShape("SpMM", 3, 5, 3, 8, true)
	wantShapeErr(t, err, "heads 3, width 8: want heads >= 1 dividing width")
	o, e, err := EdgeSumShape("EdgeSum", 3, 7, 2)
	if err != nil || o != 6 || e != 14 {
		t.Fatalf("EdgeSumShape = %d, %d, %v; want 6, 14", o, e, err)
	}
	_, err = EdgeShape("EdgeSoftmax", 7, 0)
	wantShapeErr(t, err, "heads 0, want >= 1")
}

func TestCheckCSR(t *testing.T) {
	if err := CheckCSR("NewSparse", 2, 3, []int64{0, 1, 2}, []int32{2, 0}); err != nil {
		t.Fatal(err)
	}
	wantShapeErr(t, CheckCSR("NewSparse", 2, 3, []int64{0, 2, 1}, []int32{2, 0}), "indptr decreases at 2 (2 > 1)")
	err := CheckCSR("NewSparse", 2, 3, []int64{0, 1, 2}, []int32{2, 3})
	var ie *IndexError
	if !errors.As(err, &ie) || ie.Pos != 1 || ie.Value != 3 || ie.Limit != 3 {
		t.Fatalf("err = %v, want IndexError at 1", err)
	}
	// The first bad index of a longer list, whatever its position among
	// the four running maxima and the tail: too large or negative.
	for n := 1; n <= 11; n++ {
		for bad := range n {
			for _, v := range []int32{7, -1, math.MinInt32, math.MaxInt32} {
				idx := make([]int32, n)
				for i := range idx {
					idx[i] = int32(i % 7)
				}
				idx[bad] = v
				if bad+1 < n {
					idx[n-1] = 9 // a later bad one is not the one named
				}
				err := CheckCSR("NewSparse", 1, 7, []int64{0, int64(n)}, idx)
				if !errors.As(err, &ie) || ie.Pos != bad || ie.Value != int64(v) {
					t.Fatalf("n %d, %d at %d: err = %v", n, v, bad, err)
				}
			}
		}
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(6 - i%7)
		}
		if err := CheckCSR("NewSparse", 1, 7, []int64{0, int64(n)}, idx); err != nil {
			t.Fatalf("n %d: %v", n, err)
		}
	}
}

func TestGemmAndArgmaxShape(t *testing.T) {
	a, b, c, err := GemmShape("Gemm", 2, 3, 4)
	if err != nil || a != 8 || b != 12 || c != 6 {
		t.Fatalf("GemmShape = %d, %d, %d, %v; want 8, 12, 6", a, b, c, err)
	}
	_, err = ArgmaxShape("ArgmaxRows", 2, 0)
	wantShapeErr(t, err, "cols must be >= 1")
}

// BenchmarkCheckCSR: a whole-neighborhood block the size of a papers
// inference chunk (44,000 rows, 1.4M indices).
func BenchmarkCheckCSR(b *testing.B) {
	const rows, nnz, cols = 44000, 1400000, 111000000
	indptr := make([]int64, rows+1)
	for r := range rows {
		indptr[r+1] = int64((r + 1) * (nnz / rows))
	}
	indices := make([]int32, indptr[rows])
	for i := range indices {
		indices[i] = int32((i * 7919) % cols)
	}
	b.SetBytes(4 * int64(len(indices)))
	for b.Loop() {
		if err := CheckCSR("NewSparse", rows, cols, indptr, indices); err != nil {
			b.Fatal(err)
		}
	}
}
