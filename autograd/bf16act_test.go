package autograd_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// sageNet is a two-layer SAGE chain as nn's fused models run it
// (FirstRows, MatMul, SpMM with mean weights, BiasActDropout with ReLU
// and dropout, logits through BiasActDropoutAs float32, LogSoftmax,
// NLLLoss), with a float64 reference of the same function.
type sageNet struct {
	n0, n1, n2, d, h, c int
	a1, a2              csr // n1 x n0, n2 x n1
	x                   []float32
	labels              []int32
	p                   float32
	seed                uint64
	params              [][]float64 // W1s, W1n, b1, W2s, W2n, b2
	shapes              [][2]int
}

type csr struct {
	ptr []int64
	idx []int32
}

func (a csr) mean(rows int) []float32 {
	w := make([]float32, len(a.idx))
	for r := 0; r < rows; r++ {
		for e := a.ptr[r]; e < a.ptr[r+1]; e++ {
			w[e] = 1 / float32(a.ptr[r+1]-a.ptr[r])
		}
	}
	return w
}

func randCSR(r *rand.Rand, rows, cols int) csr {
	a := csr{ptr: make([]int64, rows+1)}
	for i := 0; i < rows; i++ {
		for k := r.IntN(4); k > 0; k-- {
			a.idx = append(a.idx, int32(r.IntN(cols)))
		}
		a.ptr[i+1] = int64(len(a.idx))
	}
	return a
}

func newSageNet() *sageNet {
	r := rand.New(rand.NewPCG(3, 4))
	n := &sageNet{n0: 14, n1: 9, n2: 4, d: 6, h: 8, c: 3, p: 0.3, seed: 99}
	n.a1, n.a2 = randCSR(r, n.n1, n.n0), randCSR(r, n.n2, n.n1)
	n.x = make([]float32, n.n0*n.d)
	for i := range n.x {
		n.x[i] = backend.RoundBF16(float32(r.NormFloat64()))
	}
	n.labels = make([]int32, n.n2)
	for i := range n.labels {
		n.labels[i] = int32(r.IntN(n.c))
	}
	n.shapes = [][2]int{{n.d, n.h}, {n.d, n.h}, {1, n.h}, {n.h, n.c}, {n.h, n.c}, {1, n.c}}
	for _, s := range n.shapes {
		p := make([]float64, s[0]*s[1])
		for i := range p {
			p[i] = 0.5 * r.NormFloat64()
		}
		n.params = append(n.params, p)
	}
	return n
}

// layer64 is one SAGE layer in float64: out = in[:dst] Ws + mean(in) Wn + b.
func layer64(in []float64, cols int, a csr, dst int, ws, wn, b []float64, out int) []float64 {
	y := make([]float64, dst*out)
	for i := 0; i < dst; i++ {
		agg := make([]float64, cols)
		deg := float64(a.ptr[i+1] - a.ptr[i])
		for e := a.ptr[i]; e < a.ptr[i+1]; e++ {
			for k := 0; k < cols; k++ {
				agg[k] += in[int(a.idx[e])*cols+k] / deg
			}
		}
		for o := 0; o < out; o++ {
			v := b[o]
			for k := 0; k < cols; k++ {
				v += in[i*cols+k]*ws[k*out+o] + agg[k]*wn[k*out+o]
			}
			y[i*out+o] = v
		}
	}
	return y
}

// loss64 is the network's loss in float64.
func (n *sageNet) loss64(ps [][]float64) float64 {
	x := make([]float64, len(n.x))
	for i, v := range n.x {
		x[i] = float64(v)
	}
	h1 := layer64(x, n.d, n.a1, n.n1, ps[0], ps[1], ps[2], n.h)
	for i, v := range h1 {
		keep := 0.0
		if rng.DropUniform(n.seed, uint64(i)) >= n.p {
			keep = float64(1 / (1 - n.p))
		}
		h1[i] = math.Max(v, 0) * keep
	}
	z := layer64(h1, n.h, n.a2, n.n2, ps[3], ps[4], ps[5], n.c)
	var l float64
	for i := 0; i < n.n2; i++ {
		row := z[i*n.c : (i+1)*n.c]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		l -= row[n.labels[i]] - m - math.Log(s)
	}
	return l / float64(n.n2)
}

// tapeGrads runs the network on a tape with activations dt and returns
// the parameter gradients, and the hidden activation's dtype.
func (n *sageNet) tapeGrads(t *testing.T, b backend.Backend, dt backend.DType) ([][]float64, backend.DType) {
	t.Helper()
	tp := autograd.NewTape(b)
	defer tp.Release()
	if got := tp.SetActivations(dt); got != (dt == backend.BFloat16) {
		t.Fatalf("SetActivations(%v) = %v", dt, got)
	}
	var ws []*autograd.Var
	var grads []backend.Buffer
	for i, s := range n.shapes {
		v := make([]float32, len(n.params[i]))
		for k, p := range n.params[i] {
			v[k] = float32(p)
		}
		g := buf(t, b, make([]float32, len(v)))
		w, err := tp.Leaf(buf(t, b, v), g, s[0], s[1])
		if err != nil {
			t.Fatal(err)
		}
		ws, grads = append(ws, w), append(grads, g)
	}
	must := func(v *autograd.Var, err error) *autograd.Var {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sp := func(a csr, rows, cols int) (backend.Sparse, *autograd.Var) {
		s, err := b.NewSparse(rows, cols, a.ptr, a.idx)
		if err != nil {
			t.Fatal(err)
		}
		return s, must(tp.Const(buf(t, b, a.mean(rows)), len(a.idx), 1))
	}
	s1, m1 := sp(n.a1, n.n1, n.n0)
	s2, m2 := sp(n.a2, n.n2, n.n1)
	x := must(tp.ToActivations(must(tp.Const(buf(t, b, n.x), n.n0, n.d))))
	layer := func(in *autograd.Var, s backend.Sparse, m *autograd.Var, dst int, w []*autograd.Var) (*autograd.Var, *autograd.Var) {
		self := must(tp.MatMul(must(tp.FirstRows(in, dst)), w[0]))
		neigh := must(tp.MatMul(must(tp.SpMM(s, in, m)), w[1]))
		return self, neigh
	}
	a, c := layer(x, s1, m1, n.n1, ws[0:2])
	h1 := must(tp.BiasActDropout(a, c, ws[2], true, n.p, n.seed))
	a, c = layer(h1, s2, m2, n.n2, ws[3:5])
	z := must(tp.BiasActDropoutAs(backend.Float32, a, c, ws[5], false, 0, 0))
	lp := must(tp.LogSoftmax(z))
	rows := make([]int32, n.n2)
	for i := range rows {
		rows[i] = int32(i)
	}
	ri, _ := b.Alloc(backend.Int32, n.n2)
	li, _ := b.Alloc(backend.Int32, n.n2)
	b.Upload(ri, rows)
	b.Upload(li, n.labels)
	l, _, err := tp.NLLLoss(lp, ri, li)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Backward(l); err != nil {
		t.Fatal(err)
	}
	out := make([][]float64, len(grads))
	for i, g := range grads {
		for _, v := range host(t, b, g) {
			out[i] = append(out[i], float64(v))
		}
	}
	return out, h1.DType()
}

// TestBF16ActivationsGradients: the fused SAGE chain on a tape with
// bfloat16 activations (CPU emulation) stores its hidden activation as
// bfloat16 and gets parameter gradients within bfloat16 tolerance of
// float64 finite differences of the unrounded function; the float32
// tape is within float32 tolerance, and the two differ (the bfloat16
// path is taken).
func TestBF16ActivationsGradients(t *testing.T) {
	b, err := cpu.New(cpu.Options{Precision: backend.BF16})
	if err != nil {
		t.Fatal(err)
	}
	n := newSageNet()
	fd := make([][]float64, len(n.params))
	const eps = 1e-6
	for i, p := range n.params {
		for k := range p {
			old := p[k]
			p[k] = old + eps
			up := n.loss64(n.params)
			p[k] = old - eps
			down := n.loss64(n.params)
			p[k] = old
			fd[i] = append(fd[i], (up-down)/(2*eps))
		}
	}
	relErr := func(got [][]float64) float64 {
		var num, den float64
		for i := range got {
			for k, g := range got[i] {
				num += (g - fd[i][k]) * (g - fd[i][k])
				den += fd[i][k] * fd[i][k]
			}
		}
		return math.Sqrt(num / den)
	}
	g32, dt32 := n.tapeGrads(t, setup(t), backend.Float32) // an fp32 back end: exact products
	g16, dt16 := n.tapeGrads(t, b, backend.BFloat16)
	if dt32 != backend.Float32 || dt16 != backend.BFloat16 {
		t.Fatalf("hidden activations stored as %v and %v", dt32, dt16)
	}
	e32, e16 := relErr(g32), relErr(g16)
	t.Logf("gradient error against float64 finite differences: fp32 tape %.2g, bf16 tape %.2g", e32, e16)
	if e32 > 1e-4 {
		t.Errorf("fp32 tape: relative gradient error %.3g", e32)
	}
	if e16 > 3e-2 {
		t.Errorf("bf16 tape: relative gradient error %.3g, want <= 3e-2", e16)
	}
	if e16 <= e32 {
		t.Errorf("bf16 tape as exact as the fp32 one (%.3g <= %.3g): bfloat16 not used", e16, e32)
	}
}

// TestShareHalf: a product of bfloat16 activations with a float32 weight
// reads the bfloat16 copy shared for it (Tape.ShareHalf) instead of
// converting the weight: with the weight's own rounding shared, the
// output and gradients equal the converting tape's bit for bit; with
// another copy shared, the product reads that one. Bad pairs fail.
func TestShareHalf(t *testing.T) {
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const m, k, n = 5, 7, 3
	r := rand.New(rand.NewPCG(8, 9))
	xs := make([]float32, m*k)
	for i := range xs {
		xs[i] = r.Float32()*2 - 1
	}
	ws := make([]float32, k*n)
	for i := range ws {
		ws[i] = r.Float32()*2 - 1
	}
	xh := make([]uint16, len(xs))
	backend.ToBF16(xh, xs)
	// run returns the product's values and the weight's gradient with
	// half (nil: none) shared for the weight.
	run := func(half func(w backend.Buffer) backend.Buffer) ([]uint16, []float32) {
		t.Helper()
		tp := autograd.NewTape(b)
		defer tp.Release()
		if !tp.SetActivations(backend.BFloat16) {
			t.Fatal("the CPU back end refused bfloat16 activations")
		}
		xb, _ := b.Alloc(backend.BFloat16, m*k)
		wv, _ := b.Alloc(backend.Float32, k*n)
		wg, _ := b.Alloc(backend.Float32, k*n)
		defer func() { b.Free(xb); b.Free(wv); b.Free(wg) }()
		if err := b.Upload(xb, xh); err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(wv, ws); err != nil {
			t.Fatal(err)
		}
		if half != nil {
			h := half(wv)
			defer b.Free(h)
			if err := tp.ShareHalf(wv, h); err != nil {
				t.Fatal(err)
			}
		}
		x, err := tp.Const(xb, m, k)
		if err != nil {
			t.Fatal(err)
		}
		w, err := tp.Leaf(wv, wg, k, n)
		if err != nil {
			t.Fatal(err)
		}
		y, err := tp.MatMul(x, w)
		if err != nil {
			t.Fatal(err)
		}
		if y.DType() != backend.BFloat16 {
			t.Fatalf("product is %s, want bfloat16", y.DType())
		}
		// A float32 head and a loss: y's gradient flows back into w
		// through the bfloat16 product.
		bias, _ := b.Alloc(backend.Float32, n)
		defer b.Free(bias)
		bv, err := tp.Const(bias, 1, n)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := tp.BiasActDropoutAs(backend.Float32, y, nil, bv, false, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		labels := make([]int32, m*n)
		for i := range labels {
			labels[i] = int32(i % 2)
		}
		lab, _ := b.Alloc(backend.Int32, m*n)
		defer b.Free(lab)
		if err := b.Upload(lab, labels); err != nil {
			t.Fatal(err)
		}
		loss, _, err := tp.BCEWithLogits(logits, lab)
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Backward(loss); err != nil {
			t.Fatal(err)
		}
		out := make([]uint16, m*n)
		if err := b.Download(out, y.Value); err != nil {
			t.Fatal(err)
		}
		grad := make([]float32, k*n)
		if err := b.Download(grad, wg); err != nil {
			t.Fatal(err)
		}
		return out, grad
	}
	converted := func(w backend.Buffer) backend.Buffer {
		h, _ := b.Alloc(backend.BFloat16, w.Len())
		if err := b.Convert(h, w); err != nil {
			t.Fatal(err)
		}
		return h
	}
	zeros := func(w backend.Buffer) backend.Buffer {
		h, _ := b.Alloc(backend.BFloat16, w.Len())
		return h
	}
	want, wantG := run(nil)
	got, gotG := run(converted)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("product %d: %#04x with the shared copy, %#04x converting", i, got[i], want[i])
		}
	}
	nonzero := 0
	for i := range wantG {
		if math.Float32bits(gotG[i]) != math.Float32bits(wantG[i]) {
			t.Fatalf("weight gradient %d: %v with the shared copy, %v converting", i, gotG[i], wantG[i])
		}
		if wantG[i] != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("no gradient reached the weight")
	}
	z, _ := run(zeros)
	for i, v := range z {
		if v != 0 {
			t.Fatalf("product %d = %#04x with a zero copy shared, want 0 (the copy not read)", i, v)
		}
	}

	tp := autograd.NewTape(b)
	defer tp.Release()
	f, _ := b.Alloc(backend.Float32, 4)
	h3, _ := b.Alloc(backend.BFloat16, 3)
	h4, _ := b.Alloc(backend.BFloat16, 4)
	defer func() { b.Free(f); b.Free(h3); b.Free(h4) }()
	for name, pair := range map[string][2]backend.Buffer{
		"nil": {f, nil}, "swapped": {h4, f}, "both float32": {f, f}, "lengths": {f, h3},
	} {
		if err := tp.ShareHalf(pair[0], pair[1]); err == nil {
			t.Errorf("%s: ShareHalf accepted the pair", name)
		}
	}
}
