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
		if rng.Uniform01(n.seed, uint64(i)) >= n.p {
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
