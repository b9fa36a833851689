package cpu

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// Small hand-checked cases; the full conformance suite is in
// tensor/backendtest (run from cpu_test.go).

func mustNew(t *testing.T, k GemmKind) *Backend {
	t.Helper()
	b, err := New(Options{Gemm: k})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func eq(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s: [%d] = %v, want %v (all: %v)", what, i, got[i], want[i], got)
		}
	}
}

func TestSmokeGemm(t *testing.T) {
	b := mustNew(t, GemmGo)
	// A = [1 2; 3 4; 5 6] (3x2), B = [1 0 2; 0 1 3] (2x3)
	a := WrapF32([]float32{1, 2, 3, 4, 5, 6})
	bb := WrapF32([]float32{1, 0, 2, 0, 1, 3})
	c := WrapF32(make([]float32, 9))
	if err := b.Gemm(false, false, 3, 3, 2, 1, a, bb, 0, c); err != nil {
		t.Fatal(err)
	}
	eq(t, "AB", F32(c), []float32{1, 2, 8, 3, 4, 18, 5, 6, 28})
	// A^T A = [35 44; 44 56]
	c2 := WrapF32([]float32{1, 1, 1, 1})
	if err := b.Gemm(true, false, 2, 2, 3, 1, a, a, 2, c2); err != nil {
		t.Fatal(err)
	}
	eq(t, "AtA+2C", F32(c2), []float32{37, 46, 46, 58})
	if err := b.Gemm(false, false, 3, 3, 3, 1, a, bb, 0, c); err == nil {
		t.Fatal("wrong k accepted")
	}
}

func TestSmokeSparse(t *testing.T) {
	b := mustNew(t, GemmGo)
	// 3 rows x 2 cols: row0 -> {0,1}, row1 -> {}, row2 -> {1, 1}
	s, err := b.NewSparse(3, 2, []int64{0, 2, 2, 4}, []int32{0, 1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	x := WrapF32([]float32{1, 10, 2, 20}) // 2 x 2
	out := WrapF32(make([]float32, 6))
	if err := b.SpMM(out, s, false, x, nil, 1, 2); err != nil {
		t.Fatal(err)
	}
	eq(t, "Ax", F32(out), []float32{3, 30, 0, 0, 4, 40})
	w := WrapF32([]float32{1, 2, 3, 4})
	xt := WrapF32([]float32{1, 2, 3}) // 3 x 1
	outT := WrapF32(make([]float32, 2))
	if err := b.SpMM(outT, s, true, xt, w, 1, 1); err != nil {
		t.Fatal(err)
	}
	// col0: edge0 (row0, w1) -> 1; col1: edge1 (row0,w2) + edge2,3 (row2, w3+w4) -> 2 + 3*7
	eq(t, "A^T x", F32(outT), []float32{1, 23})
	sm := WrapF32(make([]float32, 4))
	if err := b.EdgeSoftmax(sm, s, WrapF32([]float32{0, 0, 1, 1}), 1); err != nil {
		t.Fatal(err)
	}
	eq(t, "softmax", F32(sm), []float32{0.5, 0.5, 0.5, 0.5})
	deg := WrapF32(make([]float32, 2))
	if err := b.RowDegreeInv(deg, s, true); err != nil {
		t.Fatal(err)
	}
	eq(t, "col deg inv", F32(deg), []float32{1, 1.0 / 3})
	if _, err := b.NewSparse(2, 2, []int64{0, 1, 2}, []int32{0, 2}); err == nil {
		t.Fatal("column index out of range accepted")
	}
}

func TestSmokeIndexing(t *testing.T) {
	b := mustNew(t, GemmGo)
	dst := WrapF32(make([]float32, 4))
	src := WrapF32([]float32{1, 2, 3, 4, 5, 6})
	if err := b.ScatterAddRows(dst, src, WrapI32([]int32{1, 0, 1}), 2, 2); err != nil {
		t.Fatal(err)
	}
	eq(t, "scatter", F32(dst), []float32{3, 4, 6, 8})
	err := b.GatherRows(WrapF32(make([]float32, 4)), src, WrapI32([]int32{0, 3}), 3, 2)
	var ie *backend.IndexError
	if !errors.As(err, &ie) || ie.Pos != 1 || ie.Value != 3 {
		t.Fatalf("GatherRows bad index: err %v", err)
	}
	logp := WrapF32([]float32{-1, -2, -3, -4})
	loss, err := b.NLLLoss(logp, WrapI32([]int32{0, 1}), WrapI32([]int32{1, 0}), 2, 2)
	if err != nil || loss != 2.5 {
		t.Fatalf("NLLLoss = %v, %v; want 2.5", loss, err)
	}
	if _, err := b.NLLLoss(logp, WrapI32([]int32{0}), WrapI32([]int32{2}), 2, 2); !errors.As(err, &ie) {
		t.Fatalf("label out of range: err %v", err)
	}
}

func TestOpenRegistered(t *testing.T) {
	be, err := backend.Open("cpu")
	if err != nil || be.Name() != "cpu" {
		t.Fatalf("Open(cpu) = %v, %v", be, err)
	}
	if _, err := backend.Open("cpu:1"); err == nil {
		t.Fatal("cpu:1 accepted")
	}
}

// The cached transpose is built once even when first requested by several
// goroutines at the same time (run with -race).
func TestConcurrentTranspose(t *testing.T) {
	b := mustNew(t, GemmGo)
	const rows, cols, deg = 500, 300, 7
	ptr := make([]int64, rows+1)
	idx := make([]int32, 0, rows*deg)
	for i := 0; i < rows; i++ {
		for d := 0; d < deg; d++ {
			idx = append(idx, int32((i*31+d*17)%cols))
		}
		ptr[i+1] = int64(len(idx))
	}
	s, err := b.NewSparse(rows, cols, ptr, idx)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, rows*4)
	for i := range x {
		x[i] = float32(i%13) - 6
	}
	outs := make([][]float32, 8)
	done := make(chan error, len(outs))
	for g := range outs {
		outs[g] = make([]float32, cols*4)
		go func() { done <- b.SpMM(WrapF32(outs[g]), s, true, WrapF32(x), nil, 1, 4) }()
	}
	for range outs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for g := 1; g < len(outs); g++ {
		eq(t, "concurrent A^T x", outs[g], outs[0])
	}
}

// FuzzNewSparse feeds arbitrary CSR arrays: NewSparse must either reject
// them with an error or accept a valid matrix that SpMM (both ways) and
// EdgeSoftmax handle, never panicking.
func FuzzNewSparse(f *testing.F) {
	f.Add(3, 2, []byte{0, 2, 2, 4}, []byte{0, 1, 1, 1})
	f.Add(2, 2, []byte{0, 1, 2}, []byte{0, 2})
	f.Add(0, 0, []byte{0}, []byte{})
	f.Add(-1, 3, []byte{}, []byte{1})
	f.Add(2, 5, []byte{1, 1, 2}, []byte{4, 4})
	b, err := New(Options{Gemm: GemmGo})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rows, cols int, ptrB, idxB []byte) {
		if rows > 1000 || cols > 1000 {
			return
		}
		ptr := make([]int64, len(ptrB))
		for i, v := range ptrB {
			ptr[i] = int64(int8(v))
		}
		idx := make([]int32, len(idxB))
		for i, v := range idxB {
			idx[i] = int32(int8(v))
		}
		s, err := b.NewSparse(rows, cols, ptr, idx)
		if err != nil {
			return
		}
		for _, tr := range []bool{false, true} {
			in, out := cols, rows
			if tr {
				in, out = rows, cols
			}
			if err := b.SpMM(WrapF32(make([]float32, out*2)), s, tr, WrapF32(make([]float32, in*2)), nil, 1, 2); err != nil {
				t.Fatalf("SpMM transpose=%v on accepted matrix: %v", tr, err)
			}
		}
		sc := WrapF32(make([]float32, s.NNZ()))
		if err := b.EdgeSoftmax(sc, s, sc, 1); err != nil {
			t.Fatal(err)
		}
		b.FreeSparse(s)
	})
}
