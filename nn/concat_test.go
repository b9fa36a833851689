package nn_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// plainCPU hides the CPU back end's backend.ConcatAggregator: SAGE layers
// on it take their two products.
type plainCPU struct{ backend.Backend }

// TestSAGEConcatProduct: a SAGE model whose first layer reads input
// features (no input gradient) computes that layer as one product of
// [x_dst | mean] and [W_self; W_neigh] (a view of the flat parameters,
// no copy); its logits and every weight's gradient agree with the two
// products' (a back end without the concatenated aggregation) to 1e-5,
// in float32 and with bfloat16 activations (there to the bfloat16
// rounding of the layer's output); with the features needing a gradient
// the layer keeps its two products, bit for bit.
func TestSAGEConcatProduct(t *testing.T) {
	const nd, ns, in, classes = 40, 90, 12, 5
	r := rand.New(rand.NewPCG(4, 2))
	csr := func(rows, cols int) ([]int64, []int32) {
		indptr := []int64{0}
		var indices []int32
		for range rows {
			for range 1 + r.IntN(5) {
				indices = append(indices, int32(r.IntN(cols)))
			}
			indptr = append(indptr, int64(len(indices)))
		}
		return indptr, indices
	}
	ptr2, idx2 := csr(nd, ns)
	ptr1, idx1 := csr(10, nd)
	x := make([]float32, ns*in)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	cfg := nn.Config{Kind: nn.KindSAGE, InDim: in, OutDim: classes, Hidden: 16, Layers: 2, NoDropout: true, Seed: 9}
	// run returns the logits and the gradients of a step (NLL loss of
	// the 10 output rows).
	run := func(b backend.Backend, half, xGrad bool) (logits []float32, grads [][]float32) {
		m, err := nn.New(b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer nn.FreeParams(b, m.Params())
		t2, err := nn.NewBlock(b, nd, ns, ptr2, idx2)
		if err != nil {
			t.Fatal(err)
		}
		defer t2.Free()
		t1, err := nn.NewBlock(b, 10, nd, ptr1, idx1)
		if err != nil {
			t.Fatal(err)
		}
		defer t1.Free()
		tape := autograd.NewTape(b)
		defer tape.Release()
		if half {
			tape.SetActivations(backend.BFloat16)
		}
		xb, err := b.Alloc(backend.Float32, len(x))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(xb)
		if err := b.Upload(xb, x); err != nil {
			t.Fatal(err)
		}
		var xv *autograd.Var
		if xGrad {
			g, _ := b.Alloc(backend.Float32, len(x))
			defer b.Free(g)
			xv, err = tape.Leaf(xb, g, ns, in)
		} else {
			xv, err = tape.Const(xb, ns, in)
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(tape, xv, []*nn.Block{t2, t1}, false, 1)
		if err != nil {
			t.Fatal(err)
		}
		if out.DType() != backend.Float32 {
			t.Fatalf("logits are %s", out.DType())
		}
		logp, err := tape.LogSoftmax(out)
		if err != nil {
			t.Fatal(err)
		}
		rows, _ := b.Alloc(backend.Int32, 10)
		labels, _ := b.Alloc(backend.Int32, 10)
		defer b.Free(rows)
		defer b.Free(labels)
		must(t, b.Upload(rows, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}))
		must(t, b.Upload(labels, []int32{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}))
		loss, _, err := tape.NLLLoss(logp, rows, labels)
		if err != nil {
			t.Fatal(err)
		}
		if err := tape.Backward(loss); err != nil {
			t.Fatal(err)
		}
		logits = make([]float32, out.Len())
		if err := b.Download(logits, out.Value); err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Params() {
			g := make([]float32, p.Len())
			if err := b.Download(g, p.Grad); err != nil {
				t.Fatal(err)
			}
			grads = append(grads, g)
		}
		return logits, grads
	}
	b := newCPU(t)
	if _, ok := b.(backend.ConcatAggregator); !ok {
		t.Fatal("the CPU back end has no concatenated aggregation")
	}
	near := func(what string, got, want []float32, tol float64) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > tol*max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
				t.Fatalf("%s[%d] = %v, the two products' %v", what, i, got[i], want[i])
			}
		}
	}
	for _, half := range []bool{false, true} {
		tol := 1e-5
		if half {
			tol = 2e-2
		}
		got, gg := run(b, half, false)
		want, wg := run(&plainCPU{b}, half, false)
		near("logits", got, want, tol)
		for i := range wg {
			near(cfg.Kind+" gradient", gg[i], wg[i], tol)
		}
	}
	got, gg := run(b, false, true)
	want, wg := run(&plainCPU{b}, false, true)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("features with a gradient: logit %d = %v, want %v bit for bit", i, got[i], want[i])
		}
	}
	for i := range wg {
		for j := range wg[i] {
			if math.Float32bits(gg[i][j]) != math.Float32bits(wg[i][j]) {
				t.Fatalf("features with a gradient: parameter %d gradient %d = %v, want %v", i, j, gg[i][j], wg[i][j])
			}
		}
	}
}
