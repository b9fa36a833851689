package nn_test

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// sparseFeatures is a 20 x 30 matrix with about 10% non-zeros (negative
// ones too), dense and as a host CSR.
func sparseFeatures(t *testing.T) ([]float32, *autograd.HostSparse) {
	t.Helper()
	s := rng.NewStream(4)
	dense := make([]float32, 20*30)
	for i := range dense {
		if s.Uniform01() < 0.1 {
			dense[i] = s.Uniform01() - 0.3
		}
	}
	h, err := autograd.HostSparseFromDense(20, 30, dense)
	must(t, err)
	return dense, h
}

// lossAndGrads runs fwd on a fresh tape with training on, takes the
// NLL loss of the logits' rows against fixed labels, back-propagates and
// returns the logits and every parameter's gradient.
func lossAndGrads(t *testing.T, b backend.Backend, m nn.Model, fwd func(*autograd.Tape) (*autograd.Var, error)) (logits []float32, grads [][]float32) {
	t.Helper()
	for _, p := range m.Params() {
		must(t, b.Fill(p.Grad, 0))
	}
	tape := autograd.NewTape(b)
	defer tape.Release()
	out, err := fwd(tape)
	must(t, err)
	rows := make([]int32, out.Rows)
	labels := make([]int32, out.Rows)
	for i := range rows {
		rows[i], labels[i] = int32(i), int32(i%out.Cols)
	}
	rb, lb := upload32(t, b, rows), upload32(t, b, labels)
	defer b.Free(rb)
	defer b.Free(lb)
	logp, err := tape.LogSoftmax(out)
	must(t, err)
	loss, _, err := tape.NLLLoss(logp, rb, lb)
	must(t, err)
	must(t, tape.Backward(loss))
	logits = download(t, b, out.Value)
	for _, p := range m.Params() {
		grads = append(grads, download(t, b, p.Grad))
	}
	return logits, grads
}

func upload32(t *testing.T, b backend.Backend, v []int32) backend.Buffer {
	t.Helper()
	buf, err := b.Alloc(backend.Int32, len(v))
	must(t, err)
	must(t, b.Upload(buf, v))
	return buf
}

func close32(a, b []float32, tol float64) int {
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > tol*(1+math.Abs(float64(a[i]))) {
			return i
		}
	}
	return -1
}

// TestSparseAsDenseDropout: with dropout on, ForwardSparseAsDense keeps
// the non-zeros that Forward's dense dropout keeps, so logits and
// gradients equal Forward's on the dense matrix (up to float32 summation
// order), for every model kind and several step seeds; ForwardSparse,
// whose mask is drawn over the non-zeros, does not.
func TestSparseAsDenseDropout(t *testing.T) {
	b := newCPU(t)
	blocks := sampledBlocks(t, b)
	defer nn.FreeBlocks(blocks)
	dense, h := sparseFeatures(t)
	xs, err := autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values)
	must(t, err)
	defer xs.Free(b)
	for _, kind := range []string{nn.KindGCN, nn.KindSAGE, nn.KindGAT} {
		// Default rates: 0.5 (0.6 for GAT) on the input and hidden layers.
		m, err := nn.New(b, nn.Config{Kind: kind, InDim: 30, Hidden: 4, OutDim: 3, Layers: 3, Seed: 2})
		must(t, err)
		differs := false
		for _, seed := range []uint64{1, 77, 1 << 40} {
			want, wantG := lossAndGrads(t, b, m, func(tape *autograd.Tape) (*autograd.Var, error) {
				x, err := tape.Upload(dense, 20, 30)
				if err != nil {
					return nil, err
				}
				return m.Forward(tape, x, blocks, true, seed)
			})
			got, gotG := lossAndGrads(t, b, m, func(tape *autograd.Tape) (*autograd.Var, error) {
				return nn.ForwardSparseAsDense(m, tape, xs, h, blocks, true, seed)
			})
			if i := close32(want, got, 1e-5); i >= 0 {
				t.Fatalf("%s seed %d: logit %d dense %v, sparse as dense %v", kind, seed, i, want[i], got[i])
			}
			for p := range wantG {
				if i := close32(wantG[p], gotG[p], 1e-5); i >= 0 {
					t.Fatalf("%s seed %d: %s gradient %d dense %v, sparse as dense %v", kind, seed, m.Params()[p].Name, i, wantG[p][i], gotG[p][i])
				}
			}
			old, _ := lossAndGrads(t, b, m, func(tape *autograd.Tape) (*autograd.Var, error) {
				return m.ForwardSparse(tape, xs, blocks, true, seed)
			})
			differs = differs || close32(want, old, 1e-3) >= 0
		}
		if !differs {
			t.Errorf("%s: ForwardSparse's non-zero mask gave the dense logits for every seed", kind)
		}
		// Without training there is no dropout: the same as ForwardSparse.
		tape := autograd.NewTape(b)
		a, err := nn.ForwardSparseAsDense(m, tape, xs, h, blocks, false, 5)
		must(t, err)
		c, err := m.ForwardSparse(tape, xs, blocks, false, 5)
		must(t, err)
		if i := close32(download(t, b, a.Value), download(t, b, c.Value), 0); i >= 0 {
			t.Fatalf("%s: evaluation logit %d differs", kind, i)
		}
		tape.Release()
		nn.FreeParams(b, m.Params())
	}
}

// TestSparseAsDenseErrors: a host matrix that does not describe the
// uploaded one is an error naming it, not a panic or a wrong mask.
func TestSparseAsDenseErrors(t *testing.T) {
	b := newCPU(t)
	blocks := sampledBlocks(t, b)
	defer nn.FreeBlocks(blocks)
	_, h := sparseFeatures(t)
	xs, err := autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values)
	must(t, err)
	defer xs.Free(b)
	m, err := nn.New(b, nn.Config{Kind: nn.KindSAGE, InDim: 30, Hidden: 4, OutDim: 3, Layers: 3, Seed: 2})
	must(t, err)
	defer nn.FreeParams(b, m.Params())
	clone := func(edit func(*autograd.HostSparse)) *autograd.HostSparse {
		c := &autograd.HostSparse{Rows: h.Rows, Cols: h.Cols, Indptr: append([]int64(nil), h.Indptr...),
			Indices: append([]int32(nil), h.Indices...), Values: append([]float32(nil), h.Values...)}
		edit(c)
		return c
	}
	cases := map[string]*autograd.HostSparse{
		"nil":            nil,
		"rows":           clone(func(c *autograd.HostSparse) { c.Rows-- }),
		"cols":           clone(func(c *autograd.HostSparse) { c.Cols++ }),
		"short indptr":   clone(func(c *autograd.HostSparse) { c.Indptr = c.Indptr[:len(c.Indptr)-1] }),
		"fewer values":   clone(func(c *autograd.HostSparse) { c.Values = c.Values[1:] }),
		"indptr start":   clone(func(c *autograd.HostSparse) { c.Indptr[0] = 1 }),
		"indptr falls":   clone(func(c *autograd.HostSparse) { c.Indptr[3], c.Indptr[4] = c.Indptr[4]+1, c.Indptr[3] }),
		"column too big": clone(func(c *autograd.HostSparse) { c.Indices[2] = 30 }),
		"negative col":   clone(func(c *autograd.HostSparse) { c.Indices[0] = -1 }),
	}
	for name, bad := range cases {
		tape := autograd.NewTape(b)
		_, err := nn.ForwardSparseAsDense(m, tape, xs, bad, blocks, true, 1)
		tape.Release()
		var le *nn.LayerError
		if !errors.As(err, &le) {
			t.Errorf("%s: error %v, want a *nn.LayerError", name, err)
		}
	}
	tape := autograd.NewTape(b)
	defer tape.Release()
	if _, err := nn.ForwardSparseAsDense(nil, tape, xs, h, blocks, true, 1); err == nil {
		t.Error("nil model accepted")
	}
	if _, err := nn.ForwardSparseAsDense(m, tape, nil, h, blocks, true, 1); err == nil {
		t.Error("nil sparse input accepted")
	}
}
