package nn_test

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// opaque wraps the CPU back end so that its Sparse matrices hide their
// host arrays, as a device back end's do: blocks made from them by
// NewBlockFromSparse take the device paths of nn. With derive set it
// implements nn.SparseDeriver by a plain host reference.
type opaque struct {
	backend.Backend
	derive bool
}

type opaqueSparse struct{ in *cpu.Sparse }

func (s *opaqueSparse) NumRows() int { return s.in.NumRows() }
func (s *opaqueSparse) NumCols() int { return s.in.NumCols() }
func (s *opaqueSparse) NNZ() int     { return s.in.NNZ() }

func un(a backend.Sparse) backend.Sparse {
	if o, ok := a.(*opaqueSparse); ok {
		return o.in
	}
	return a
}

func (o *opaque) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	a, err := o.Backend.NewSparse(rows, cols, indptr, indices)
	if err != nil {
		return nil, err
	}
	return &opaqueSparse{in: a.(*cpu.Sparse)}, nil
}
func (o *opaque) FreeSparse(a backend.Sparse) { o.Backend.FreeSparse(un(a)) }
func (o *opaque) SpMM(out backend.Buffer, a backend.Sparse, tr bool, x, w backend.Buffer, heads, width int) error {
	return o.Backend.SpMM(out, un(a), tr, x, w, heads, width)
}
func (o *opaque) SDDMM(op backend.SDDMMOp, out backend.Buffer, a backend.Sparse, u, v backend.Buffer, heads, dim int) error {
	return o.Backend.SDDMM(op, out, un(a), u, v, heads, dim)
}
func (o *opaque) EdgeSum(out backend.Buffer, a backend.Sparse, tr bool, e backend.Buffer, heads int) error {
	return o.Backend.EdgeSum(out, un(a), tr, e, heads)
}
func (o *opaque) EdgeSoftmax(out backend.Buffer, a backend.Sparse, s backend.Buffer, heads int) error {
	return o.Backend.EdgeSoftmax(out, un(a), s, heads)
}
func (o *opaque) EdgeSoftmaxBackward(ds backend.Buffer, a backend.Sparse, y, dy backend.Buffer, heads int) error {
	return o.Backend.EdgeSoftmaxBackward(ds, un(a), y, dy, heads)
}
func (o *opaque) RowDegreeInv(out backend.Buffer, a backend.Sparse, tr bool) error {
	return o.Backend.RowDegreeInv(out, un(a), tr)
}
func (o *opaque) ExpandRowsToEdges(out backend.Buffer, a backend.Sparse, v backend.Buffer) error {
	return o.Backend.ExpandRowsToEdges(out, un(a), v)
}

// deriving adds the nn.SparseDeriver methods.
type deriving struct{ *opaque }

func (o deriving) AddSelfLoops(a backend.Sparse) (backend.Sparse, error) {
	s := un(a).(*cpu.Sparse)
	ip, ix := []int64{0}, []int32{}
	for i := 0; i < s.NumRows(); i++ {
		row := s.Indices()[s.Indptr()[i]:s.Indptr()[i+1]]
		ix = append(ix, row...)
		has := false
		for _, j := range row {
			has = has || int(j) == i
		}
		if !has {
			ix = append(ix, int32(i))
		}
		ip = append(ip, int64(len(ix)))
	}
	return o.NewSparse(s.NumRows(), s.NumCols(), ip, ix)
}

func (o deriving) GCNNorm(out backend.Buffer, a backend.Sparse) error {
	s := un(a).(*cpu.Sparse)
	outdeg := make([]float64, s.NumCols())
	for _, j := range s.Indices() {
		outdeg[j]++
	}
	w := make([]float32, s.NNZ())
	for i := 0; i < s.NumRows(); i++ {
		in := math.Max(float64(s.Indptr()[i+1]-s.Indptr()[i]), 1)
		for e := s.Indptr()[i]; e < s.Indptr()[i+1]; e++ {
			w[e] = float32(1 / math.Sqrt(in*math.Max(outdeg[s.Indices()[e]], 1)))
		}
	}
	return o.Upload(out, w)
}

// rebuild makes device-style blocks (NewBlockFromSparse) of the host
// blocks' structure on back end b.
func rebuild(t *testing.T, b backend.Backend, host []*nn.Block) []*nn.Block {
	t.Helper()
	var out []*nn.Block
	for _, k := range host {
		s := k.A.(*cpu.Sparse)
		a, err := b.NewSparse(k.NumDst, k.NumSrc, s.Indptr(), s.Indices())
		must(t, err)
		d, err := nn.NewBlockFromSparse(b, a)
		must(t, err)
		out = append(out, d)
	}
	return out
}

// TestBlockFromSparseMatchesHost runs every model forward and backward
// over host-built blocks and over the same structure wrapped by
// NewBlockFromSparse (device paths for mean weights, self-loops and GCN
// weights; and the host-array path of the CPU back end), and requires the
// same logits and gradients.
func TestBlockFromSparseMatchesHost(t *testing.T) {
	c := newCPU(t)
	host := sampledBlocks(t, c)
	defer freeBlocks(host)
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
		ref := runModel(t, c, kind, host)
		for name, b := range map[string]backend.Backend{
			"device": deriving{&opaque{Backend: c}},
			"cpu":    c,
		} {
			blocks := rebuild(t, b, host)
			got := runModel(t, b, kind, blocks)
			freeBlocks(blocks)
			for i := range ref {
				if d := math.Abs(float64(got[i] - ref[i])); d > 1e-6*(1+math.Abs(float64(ref[i]))) {
					t.Fatalf("%s %s: value %d = %v, want %v", kind, name, i, got[i], ref[i])
				}
			}
		}
	}
}

// TestBlockFromSparseErrors: bad shapes, and a device block whose back
// end cannot derive self-loops, are *BlockErrors; SAGE still works there.
func TestBlockFromSparseErrors(t *testing.T) {
	c := newCPU(t)
	var be *nn.BlockError
	if _, err := nn.NewBlockFromSparse(nil, nil); !errors.As(err, &be) {
		t.Fatalf("nil backend: %v", err)
	}
	if _, err := nn.NewBlockFromSparse(c, nil); !errors.As(err, &be) {
		t.Fatalf("nil sparse: %v", err)
	}
	a, err := c.NewSparse(3, 2, []int64{0, 0, 0, 0}, nil)
	must(t, err)
	if _, err := nn.NewBlockFromSparse(c, a); !errors.As(err, &be) {
		t.Fatalf("3 destinations of 2 sources: %v", err)
	}
	o := &opaque{Backend: c}
	host := sampledBlocks(t, c)
	defer freeBlocks(host)
	blocks := rebuild(t, o, host)
	defer freeBlocks(blocks)
	if _, err := blocks[0].WithSelfLoops(); !errors.As(err, &be) {
		t.Fatalf("self-loops without a deriver: %v", err)
	}
	if _, err := blocks[0].GCNWeights(); !errors.As(err, &be) {
		t.Fatalf("GCN weights without a deriver: %v", err)
	}
	if got, want := runModel(t, o, nn.KindSAGE, blocks), runModel(t, c, nn.KindSAGE, host); len(got) != len(want) {
		t.Fatalf("SAGE over device blocks: %d values, want %d", len(got), len(want))
	}
}

// TestNLLLossOnDevice compares nn.NLLLoss with Tape.NLLLoss: value and
// gradient, with a repeated (row, label) pair.
func TestNLLLossOnDevice(t *testing.T) {
	b := newCPU(t)
	const rows, cols = 5, 4
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.7)) * 2
	}
	rb := int32Buf(t, b, []int32{0, 2, 3, 2, 4})
	lb := int32Buf(t, b, []int32{1, 3, 0, 3, 2})
	defer b.Free(rb)
	defer b.Free(lb)
	var vals [2]float64
	var grads [2][]float32
	for k := 0; k < 2; k++ {
		tape := autograd.NewTape(b)
		xb, err := b.Alloc(backend.Float32, len(x))
		must(t, err)
		must(t, b.Upload(xb, x))
		g, err := b.Alloc(backend.Float32, len(x))
		must(t, err)
		xv, err := tape.Leaf(xb, g, rows, cols)
		must(t, err)
		logp, err := tape.LogSoftmax(xv)
		must(t, err)
		var loss *autograd.Var
		if k == 0 {
			loss, vals[0], err = tape.NLLLoss(logp, rb, lb)
		} else {
			loss, err = nn.NLLLoss(tape, logp, rb, lb)
			if err == nil {
				vals[1] = float64(download(t, b, loss.Value)[0])
			}
		}
		must(t, err)
		if loss.Rows != 1 || loss.Cols != 1 {
			t.Fatalf("loss is %dx%d", loss.Rows, loss.Cols)
		}
		must(t, tape.Backward(loss))
		grads[k] = download(t, b, g)
		tape.Release()
		b.Free(xb)
		b.Free(g)
	}
	if math.Abs(vals[0]-vals[1]) > 1e-6*math.Abs(vals[0]) || vals[0] <= 0 {
		t.Fatalf("nn.NLLLoss = %v, Tape.NLLLoss = %v", vals[1], vals[0])
	}
	for i := range grads[0] {
		if math.Abs(float64(grads[0][i]-grads[1][i])) > 1e-6 {
			t.Fatalf("gradient %d: %v, want %v", i, grads[1][i], grads[0][i])
		}
	}
	if _, err := nn.NLLLoss(autograd.NewTape(b), nil, rb, lb); err == nil {
		t.Fatal("nil input accepted")
	}
}

func freeBlocks(bs []*nn.Block) {
	for _, k := range bs {
		k.Free()
	}
}

// runModel runs a 3-layer model of kind over blocks (20 inputs of width
// 6) with dropout, backward from the loss, and returns the logits
// followed by every parameter gradient.
func runModel(t *testing.T, b backend.Backend, kind string, blocks []*nn.Block) []float32 {
	t.Helper()
	m, err := nn.New(b, nn.Config{Kind: kind, InDim: 6, Hidden: 5, OutDim: 4, Layers: 3, Heads: 2, OutHeads: 2, Seed: 11})
	must(t, err)
	defer nn.FreeParams(b, m.Params())
	tape := autograd.NewTape(b)
	defer tape.Release()
	x := make([]float32, 20*6)
	for i := range x {
		x[i] = float32(math.Cos(float64(i) * 0.37))
	}
	xv, err := tape.Upload(x, 20, 6)
	must(t, err)
	out, err := m.Forward(tape, xv, blocks, true, 5)
	must(t, err)
	logp, err := tape.LogSoftmax(out)
	must(t, err)
	rb := int32Buf(t, b, []int32{0, 1, 2})
	lb := int32Buf(t, b, []int32{3, 0, 1})
	defer b.Free(rb)
	defer b.Free(lb)
	loss, _, err := tape.NLLLoss(logp, rb, lb)
	must(t, err)
	must(t, tape.Backward(loss))
	vals := download(t, b, out.Value)
	for _, p := range m.Params() {
		vals = append(vals, download(t, b, p.Grad)...)
	}
	return vals
}
