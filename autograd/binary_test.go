package autograd_test

import (
	"math"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/tensor/backend"
)

// softplus64 is log(1+e^x) in float64, stable for large |x|.
func softplus64(x float64) float64 { return math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x))) }

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// TestBCEWithLogitsReference checks the loss and the gradient of
// BCEWithLogits against the float64 formulas (softplus(x) - y x, and
// (σ(x) - y)/n), with logits up to ±40 where a naive log(σ(x)) loses
// everything to rounding.
func TestBCEWithLogitsReference(t *testing.T) {
	b := setup(t)
	x := []float32{-40, -7.5, -1, -0.25, 0, 0.3, 1.5, 6, 40, 2}
	y := []int32{0, 1, 0, 1, 1, 0, 1, 0, 1, 1}
	xb := buf(t, b, x)
	defer b.Free(xb)
	gb, err := b.Alloc(backend.Float32, len(x))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(gb)
	yb, err := b.Alloc(backend.Int32, len(y))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(yb)
	if err := b.Upload(yb, y); err != nil {
		t.Fatal(err)
	}
	tape := autograd.NewTape(b)
	defer tape.Release()
	// A 2 x 5 matrix: the loss does not care about the shape.
	xv, err := tape.Leaf(xb, gb, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	lv, loss, err := tape.BCEWithLogits(xv, yb)
	if err != nil {
		t.Fatal(err)
	}
	n := float64(len(x))
	var want float64
	for i, v := range x {
		want += softplus64(float64(v)) - float64(y[i])*float64(v)
	}
	want /= n
	if math.Abs(loss-want) > 1e-6*math.Max(1, want) {
		t.Fatalf("loss %v, float64 reference %v", loss, want)
	}
	if got := host(t, b, lv.Value)[0]; math.Abs(float64(got)-want) > 1e-5*math.Max(1, want) {
		t.Fatalf("loss Var holds %v, want %v", got, want)
	}
	if err := tape.Backward(lv); err != nil {
		t.Fatal(err)
	}
	g := host(t, b, gb)
	for i, v := range x {
		wg := (sigmoid64(float64(v)) - float64(y[i])) / n
		if math.Abs(float64(g[i])-wg) > 1e-6 {
			t.Fatalf("d loss/d x[%d] (x = %v, y = %d) = %v, float64 reference %v", i, v, y[i], g[i], wg)
		}
	}
}

// TestMulReference checks Mul's product and both gradients (a Var used
// as both factors gets both: d(a⊙a)/da = 2a).
func TestMulReference(t *testing.T) {
	b := setup(t)
	av, bv := []float32{1, -2, 3, 0.5, -1.5, 4}, []float32{2, 0.5, -1, 8, 3, -0.25}
	ab, bb := buf(t, b, av), buf(t, b, bv)
	ag, bg := buf(t, b, make([]float32, 6)), buf(t, b, make([]float32, 6))
	for _, x := range []backend.Buffer{ab, bb, ag, bg} {
		defer b.Free(x)
	}
	tape := autograd.NewTape(b)
	defer tape.Release()
	a, err := tape.Leaf(ab, ag, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tape.Leaf(bb, bg, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tape.Mul(a, c)
	if err != nil {
		t.Fatal(err)
	}
	sq, err := tape.Mul(a, a)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tape.Add(p, sq)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 6)
	for i := range want {
		want[i] = av[i] * bv[i]
	}
	equal(t, "a*b", host(t, b, p.Value), want)
	if err := tape.Backward(sumLoss(t, tape, s)); err != nil {
		t.Fatal(err)
	}
	wa, wb := make([]float32, 6), make([]float32, 6)
	for i := range wa {
		wa[i], wb[i] = bv[i]+2*av[i], av[i]
	}
	equal(t, "d/da", host(t, b, ag), wa)
	equal(t, "d/db", host(t, b, bg), wb)
}

func TestBCEWithLogitsErrors(t *testing.T) {
	b := setup(t)
	tape := autograd.NewTape(b)
	defer tape.Release()
	x, err := tape.Upload([]float32{1, 2, 3}, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	i32 := func(v ...int32) backend.Buffer {
		x, err := b.Alloc(backend.Int32, len(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(x, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free(x) })
		return x
	}
	f32 := buf(t, b, []float32{0, 1, 0})
	defer b.Free(f32)
	for name, labels := range map[string]backend.Buffer{
		"nil": nil, "float labels": f32, "short": i32(0, 1), "label 2": i32(0, 2, 1), "label -1": i32(0, -1, 1),
	} {
		if _, _, err := tape.BCEWithLogits(x, labels); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	empty, err := tape.Upload(nil, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tape.BCEWithLogits(empty, i32()); err == nil {
		t.Error("no logits: no error")
	}
	y, err := tape.Upload([]float32{1, 2}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tape.Mul(x, y); err == nil {
		t.Error("Mul of 3x1 and 2x1: no error")
	}
}
