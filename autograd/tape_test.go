package autograd_test

import (
	"errors"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

func setup(t *testing.T) backend.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func buf(t *testing.T, b backend.Backend, v []float32) backend.Buffer {
	t.Helper()
	x, err := b.Alloc(backend.Float32, len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upload(x, v); err != nil {
		t.Fatal(err)
	}
	return x
}

func host(t *testing.T, b backend.Backend, x backend.Buffer) []float32 {
	t.Helper()
	out := make([]float32, x.Len())
	if err := b.Download(out, x); err != nil {
		t.Fatal(err)
	}
	return out
}

func equal(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// sumLoss returns 1x1 = x (1 x n) * ones (n x 1), i.e. the sum of x.
func sumLoss(t *testing.T, tape *autograd.Tape, x *autograd.Var) *autograd.Var {
	t.Helper()
	flat, err := tape.Reshape(x, 1, x.Len())
	if err != nil {
		t.Fatal(err)
	}
	ones := make([]float32, x.Len())
	for i := range ones {
		ones[i] = 1
	}
	o, err := tape.Upload(ones, x.Len(), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tape.MatMul(flat, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Hand-computed: y = relu(x*w), L = sum(y), with x = [1 -2], w = [3; 1]:
// x*w = 1, dL/dw = x^T = [1; -2]; dL/dx = w^T = [3 1].
func TestHandComputedAndAccumulation(t *testing.T) {
	b := setup(t)
	w := buf(t, b, []float32{3, 1})
	gw := buf(t, b, []float32{0, 0})
	tape := autograd.NewTape(b)
	for step := 1; step <= 2; step++ {
		x, err := tape.Upload([]float32{1, -2}, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		wv, err := tape.Leaf(w, gw, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		y, err := tape.MatMul(x, wv)
		if err != nil {
			t.Fatal(err)
		}
		r, err := tape.ReLU(y)
		if err != nil {
			t.Fatal(err)
		}
		if err := tape.Backward(sumLoss(t, tape, r)); err != nil {
			t.Fatal(err)
		}
		if x.Grad != nil {
			t.Fatal("a constant input received a gradient")
		}
		// Parameter gradients accumulate across steps until zeroed.
		equal(t, "dw", host(t, b, gw), []float32{float32(step), float32(-2 * step)})
		tape.Release()
	}
}

// A Var used by two ops receives the sum of both gradients: L = sum(x + x*2).
func TestFanOutSums(t *testing.T) {
	b := setup(t)
	xb, gx := buf(t, b, []float32{1, 2, 3}), buf(t, b, []float32{0, 0, 0})
	tape := autograd.NewTape(b)
	defer tape.Release()
	x, _ := tape.Leaf(xb, gx, 1, 3)
	x2, err := tape.Scale(x, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tape.Add(x, x2)
	if err != nil {
		t.Fatal(err)
	}
	if err := tape.Backward(sumLoss(t, tape, s)); err != nil {
		t.Fatal(err)
	}
	equal(t, "dx", host(t, b, gx), []float32{3, 3, 3})
}

func TestErrorsNotPanics(t *testing.T) {
	b := setup(t)
	tape := autograd.NewTape(b)
	a, _ := tape.Upload(make([]float32, 6), 2, 3)
	c, _ := tape.Upload(make([]float32, 6), 2, 3)
	var ae *autograd.Error
	if _, err := tape.MatMul(a, c); !errors.As(err, &ae) {
		t.Fatalf("MatMul 2x3*2x3: %v", err)
	}
	if _, err := tape.Add(a, nil); !errors.As(err, &ae) {
		t.Fatalf("Add nil: %v", err)
	}
	if _, err := tape.Dropout(a, 1, 0); !errors.As(err, &ae) {
		t.Fatalf("Dropout p=1: %v", err)
	}
	if _, err := tape.Reshape(a, 4, 2); !errors.As(err, &ae) {
		t.Fatalf("Reshape 6->8: %v", err)
	}
	if _, err := tape.Upload(make([]float32, 5), 2, 3); !errors.As(err, &ae) {
		t.Fatalf("Upload 5 for 2x3: %v", err)
	}
	if err := tape.Backward(a); !errors.As(err, &ae) {
		t.Fatalf("Backward on 2x3: %v", err)
	}
	idx, _ := b.Alloc(backend.Int32, 1)
	_ = b.Upload(idx, []int32{7})
	if _, err := tape.GatherRows(a, idx); err == nil {
		t.Fatal("out-of-range gather accepted")
	}
	s, _ := b.NewSparse(2, 3, []int64{0, 1, 2}, []int32{0, 1})
	if _, err := tape.SpMM(s, a, nil); !errors.As(err, &ae) {
		t.Fatalf("SpMM of a 2x3 matrix with 2-row x: %v", err)
	}
	var nilTape *autograd.Tape
	if _, err := nilTape.ReLU(a); !errors.As(err, &ae) {
		t.Fatalf("nil tape: %v", err)
	}
	if _, err := nilTape.Upload([]float32{1}, 1, 1); !errors.As(err, &ae) {
		t.Fatalf("nil tape upload: %v", err)
	}
	nilTape.Release()
	tape.Release()
	if _, err := tape.ReLU(a); !errors.Is(err, autograd.ErrReleased) {
		t.Fatalf("use after Release: %v", err)
	}
	other := autograd.NewTape(b)
	x, _ := other.Upload([]float32{1}, 1, 1)
	if _, err := tape.ReLU(x); !errors.Is(err, autograd.ErrReleased) {
		t.Fatalf("var of another tape: %v", err)
	}
}

// Ops whose output does not lead to the loss do not run their backward.
func TestUnusedBranchGetsNoGradient(t *testing.T) {
	b := setup(t)
	xb, gx := buf(t, b, []float32{1, 2}), buf(t, b, []float32{0, 0})
	tape := autograd.NewTape(b)
	defer tape.Release()
	x, _ := tape.Leaf(xb, gx, 1, 2)
	unused, _ := tape.ELU(x, 1)
	used, _ := tape.Scale(x, 3)
	if err := tape.Backward(sumLoss(t, tape, used)); err != nil {
		t.Fatal(err)
	}
	if unused.Grad != nil {
		t.Fatal("unused branch got a gradient")
	}
	equal(t, "dx", host(t, b, gx), []float32{3, 3})
}

func TestSparseFromDense(t *testing.T) {
	b := setup(t)
	xs, err := autograd.SparseFromDense(b, 2, 3, []float32{0, 2, 0, 1, 0, 3})
	if err != nil {
		t.Fatal(err)
	}
	defer xs.Free(b)
	if xs.A.NNZ() != 3 {
		t.Fatalf("nnz %d, want 3", xs.A.NNZ())
	}
	equal(t, "values", host(t, b, xs.Values), []float32{2, 1, 3})
	tape := autograd.NewTape(b)
	defer tape.Release()
	w, _ := tape.Upload([]float32{1, 10, 100}, 3, 1)
	y, err := tape.SparseMatMul(xs, w)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "X*w", host(t, b, y.Value), []float32{20, 301})
	if _, err := autograd.SparseFromDense(b, 2, 3, []float32{1}); err == nil {
		t.Fatal("short dense accepted")
	}
}

func TestHostSparseGather(t *testing.T) {
	b := setup(t)
	h, err := autograd.HostSparseFromDense(3, 2, []float32{1, 0, 0, 0, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	xs, err := h.Gather(b, []int32{2, 0, 2, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer xs.Free(b)
	if xs.Rows != 4 || xs.Cols != 2 || xs.A.NNZ() != 5 {
		t.Fatalf("gathered %dx%d with %d nnz, want 4x2 with 5", xs.Rows, xs.Cols, xs.A.NNZ())
	}
	tape := autograd.NewTape(b)
	defer tape.Release()
	w, _ := tape.Upload([]float32{1, 10}, 2, 1)
	y, err := tape.SparseMatMul(xs, w)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "gathered X*w", host(t, b, y.Value), []float32{32, 1, 32, 0})
	if _, err := h.Gather(b, []int32{3}); err == nil {
		t.Fatal("out-of-range row accepted")
	}
}

// Scratch is a constant the caller fills on the back end: it needs no
// gradient, a gradient still flows past it through MatMul, and a
// negative shape is refused.
func TestScratch(t *testing.T) {
	b := setup(t)
	tape := autograd.NewTape(b)
	defer tape.Release()
	m, err := tape.Scratch(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != 1 || m.Cols != 3 || m.RequiresGrad || m.Value.Len() != 3 {
		t.Fatalf("Scratch(1, 3) = %dx%d, grad %v, %d values", m.Rows, m.Cols, m.RequiresGrad, m.Value.Len())
	}
	if err := b.Upload(m.Value, []float32{2, -1, 0.5}); err != nil {
		t.Fatal(err)
	}
	x, err := tape.Leaf(buf(t, b, []float32{1, 2, 3}), buf(t, b, make([]float32, 3)), 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tape.MatMul(m, x)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "m x", host(t, b, l.Value), []float32{2*1 - 2 + 0.5*3})
	if err := tape.Backward(l); err != nil {
		t.Fatal(err)
	}
	equal(t, "dL/dx", host(t, b, x.Grad), []float32{2, -1, 0.5})
	if _, err := tape.Scratch(-1, 2); err == nil {
		t.Fatal("Scratch(-1, 2) accepted")
	}
}
