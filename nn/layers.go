package nn

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// LayerError reports a bad layer input (shape mismatch, missing block).
type LayerError struct {
	Layer string
	Msg   string
}

func (e *LayerError) Error() string { return "nn: " + e.Layer + ": " + e.Msg }

func layerErr(layer, format string, args ...any) error {
	return &LayerError{Layer: layer, Msg: fmt.Sprintf(format, args...)}
}

// uniformParam allocates p (rows x cols) with values uniform in
// [-limit, limit) drawn from the rng stream keyed by seed.
func uniformParam(b backend.Backend, name string, rows, cols int, limit float64, seed uint64) (*Param, error) {
	p, err := NewParam(b, name, rows, cols)
	if err != nil {
		return nil, err
	}
	s := rng.NewStream(seed)
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32((2*float64(s.Uniform01()) - 1) * limit)
	}
	if err := b.Upload(p.Value, data); err != nil {
		FreeParams(b, []*Param{p})
		return nil, fmt.Errorf("nn: init %q: %w", name, err)
	}
	return p, nil
}

// glorot is the Xavier-uniform bound sqrt(6/(fanIn+fanOut)).
func glorot(fanIn, fanOut int) float64 { return math.Sqrt(6 / float64(fanIn+fanOut)) }

// paramSet builds a layer's parameters, freeing what it made on error.
type paramSet struct {
	b    backend.Backend
	seed uint64
	ps   []*Param
	err  error
}

func (s *paramSet) uniform(name string, rows, cols int, limit float64) *Param {
	if s.err != nil {
		return nil
	}
	p, err := uniformParam(s.b, name, rows, cols, limit, rng.Derive(s.seed, uint64(len(s.ps))))
	if err != nil {
		s.err = err
		FreeParams(s.b, s.ps)
		return nil
	}
	s.ps = append(s.ps, p)
	return p
}

func (s *paramSet) zeros(name string, rows, cols int) *Param {
	if s.err != nil {
		return nil
	}
	p, err := NewParam(s.b, name, rows, cols)
	if err != nil {
		s.err = err
		FreeParams(s.b, s.ps)
		return nil
	}
	s.ps = append(s.ps, p)
	return p
}

func vars(t *autograd.Tape, ps ...*Param) ([]*autograd.Var, error) {
	out := make([]*autograd.Var, len(ps))
	for i, p := range ps {
		if p == nil {
			continue
		}
		v, err := p.Var(t)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// ---------------------------------------------------------------- Linear

// Linear is y = x W + b with W (In x Out) Glorot-uniform and b (1 x Out)
// zero-initialized.
//
// Shapes: x (N x In) -> y (N x Out).
type Linear struct {
	W, B    *Param // B is nil without bias
	In, Out int
}

// NewLinear makes a Linear layer named name ("name.weight", "name.bias")
// initialized from seed.
func NewLinear(b backend.Backend, name string, in, out int, bias bool, seed uint64) (*Linear, error) {
	s := &paramSet{b: b, seed: seed}
	l := &Linear{In: in, Out: out}
	l.W = s.uniform(name+".weight", in, out, glorot(in, out))
	if bias {
		l.B = s.zeros(name+".bias", 1, out)
	}
	return l, s.err
}

// Params returns W and, when present, B.
func (l *Linear) Params() []*Param {
	if l.B == nil {
		return []*Param{l.W}
	}
	return []*Param{l.W, l.B}
}

// Forward computes x W + b.
func (l *Linear) Forward(t *autograd.Tape, x *autograd.Var) (*autograd.Var, error) {
	if t == nil || x == nil || x.Cols != l.In {
		return nil, layerErr("Linear", "nil tape or input without %d columns", l.In)
	}
	vs, err := vars(t, l.W, l.B)
	if err != nil {
		return nil, err
	}
	y, err := t.MatMul(x, vs[0])
	if err != nil || l.B == nil {
		return y, err
	}
	return t.AddBias(y, vs[1])
}

// ForwardSparse computes X W + b for a sparse X (SpMM with X's values).
func (l *Linear) ForwardSparse(t *autograd.Tape, x *autograd.SparseInput) (*autograd.Var, error) {
	if t == nil || x == nil || x.Cols != l.In {
		return nil, layerErr("Linear", "nil tape or sparse input without %d columns", l.In)
	}
	vs, err := vars(t, l.W, l.B)
	if err != nil {
		return nil, err
	}
	y, err := t.SparseMatMul(x, vs[0])
	if err != nil || l.B == nil {
		return y, err
	}
	return t.AddBias(y, vs[1])
}

// project computes x W for a dense or sparse input (exactly one non-nil).
func project(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, w *autograd.Var) (*autograd.Var, error) {
	if xs != nil {
		return t.SparseMatMul(xs, w)
	}
	return t.MatMul(x, w)
}

func inputRows(x *autograd.Var, xs *autograd.SparseInput) (rows, cols int) {
	if xs != nil {
		return xs.Rows, xs.Cols
	}
	if x != nil {
		return x.Rows, x.Cols
	}
	return -1, -1
}

func checkInput(layer string, t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block, in int) error {
	if t == nil {
		return layerErr(layer, "nil tape")
	}
	if err := blk.live(); err != nil {
		return layerErr(layer, "%v", err)
	}
	rows, cols := inputRows(x, xs)
	if rows != blk.NumSrc || cols != in {
		return layerErr(layer, "input is %dx%d, want %dx%d (block sources x in)", rows, cols, blk.NumSrc, in)
	}
	return nil
}

// ---------------------------------------------------------------- GCNConv

// GCNConv is the graph convolution of Kipf & Welling (2017):
//
//	H' = D^-1/2 (A+I) D^-1/2 H W + b
//
// with self-loops added to destinations that lack one and degrees of A+I.
// On a sampled block it follows DGL's GraphConv(norm='both') on the block
// with self-loops: w_ij = 1/sqrt(outdeg(j) indeg(i)) (see
// Block.GCNWeights). W (In x Out) is Glorot-uniform, b (1 x Out) zero.
// When In > Out the product with W is taken before aggregation (cheaper).
//
// Shapes: H (NumSrc x In) -> H' (NumDst x Out).
type GCNConv struct {
	W, B    *Param
	In, Out int
}

// NewGCNConv makes a GCNConv named name, initialized from seed.
func NewGCNConv(b backend.Backend, name string, in, out int, seed uint64) (*GCNConv, error) {
	s := &paramSet{b: b, seed: seed}
	c := &GCNConv{In: in, Out: out}
	c.W = s.uniform(name+".weight", in, out, glorot(in, out))
	c.B = s.zeros(name+".bias", 1, out)
	return c, s.err
}

// Params returns W, B.
func (c *GCNConv) Params() []*Param { return []*Param{c.W, c.B} }

// Forward applies the layer to dense features x over blk.
func (c *GCNConv) Forward(t *autograd.Tape, x *autograd.Var, blk *Block) (*autograd.Var, error) {
	return c.forward(t, x, nil, blk)
}

// ForwardSparse applies the layer to a sparse feature matrix over blk.
func (c *GCNConv) ForwardSparse(t *autograd.Tape, x *autograd.SparseInput, blk *Block) (*autograd.Var, error) {
	return c.forward(t, nil, x, blk)
}

func (c *GCNConv) forward(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (*autograd.Var, error) {
	h, bias, err := c.parts(t, x, xs, blk)
	if err != nil {
		return nil, err
	}
	return t.BiasActDropout(h, nil, bias, false, 0, 0)
}

// parts returns the layer's output before its bias, and the bias.
func (c *GCNConv) parts(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (h, bias *autograd.Var, err error) {
	if err := checkInput("GCNConv", t, x, xs, blk, c.In); err != nil {
		return nil, nil, err
	}
	loops, err := blk.WithSelfLoops()
	if err != nil {
		return nil, nil, err
	}
	wbuf, err := blk.GCNWeights()
	if err != nil {
		return nil, nil, err
	}
	norm, err := t.Const(wbuf, loops.NNZ(), 1)
	if err != nil {
		return nil, nil, err
	}
	vs, err := vars(t, c.W, c.B)
	if err != nil {
		return nil, nil, err
	}
	if xs != nil || c.In > c.Out {
		z, err := project(t, x, xs, vs[0])
		if err != nil {
			return nil, nil, err
		}
		if h, err = t.SpMM(loops.A, z, norm); err != nil {
			return nil, nil, err
		}
	} else {
		agg, err := t.SpMM(loops.A, x, norm)
		if err != nil {
			return nil, nil, err
		}
		if h, err = t.MatMul(agg, vs[0]); err != nil {
			return nil, nil, err
		}
	}
	return h, vs[1], nil
}

// ---------------------------------------------------------------- SAGEConv

// SAGEConv is GraphSAGE with mean aggregation (Hamilton et al. 2017, as
// PyG's SAGEConv):
//
//	h_i' = W_self h_i + W_neigh mean_{j in N(i)} h_j + b
//
// where h_i is destination i's own input row (row i of the input, since
// destinations come first among the sources). A destination without
// in-edges gets W_self h_i + b. Weights Glorot-uniform, b zero. When
// In > Out neighbors are projected before aggregation (cheaper).
//
// Shapes: H (NumSrc x In) -> H' (NumDst x Out).
type SAGEConv struct {
	WSelf, WNeigh, B *Param
	In, Out          int
}

// NewSAGEConv makes a SAGEConv named name, initialized from seed.
func NewSAGEConv(b backend.Backend, name string, in, out int, seed uint64) (*SAGEConv, error) {
	s := &paramSet{b: b, seed: seed}
	c := &SAGEConv{In: in, Out: out}
	c.WSelf = s.uniform(name+".self.weight", in, out, glorot(in, out))
	c.WNeigh = s.uniform(name+".neigh.weight", in, out, glorot(in, out))
	c.B = s.zeros(name+".bias", 1, out)
	if c.WSelf != nil && in <= out {
		c.WSelf.stackNext = true // concatProduct reads [WSelf; WNeigh]
	}
	return c, s.err
}

// Params returns WSelf, WNeigh, B.
func (c *SAGEConv) Params() []*Param { return []*Param{c.WSelf, c.WNeigh, c.B} }

// Forward applies the layer to dense features x over blk.
func (c *SAGEConv) Forward(t *autograd.Tape, x *autograd.Var, blk *Block) (*autograd.Var, error) {
	return c.forward(t, x, nil, blk)
}

// ForwardSparse applies the layer to a sparse feature matrix over blk.
func (c *SAGEConv) ForwardSparse(t *autograd.Tape, x *autograd.SparseInput, blk *Block) (*autograd.Var, error) {
	return c.forward(t, nil, x, blk)
}

// dstRows returns the first NumDst rows of h, its destination nodes' (a
// view: no copy).
func dstRows(t *autograd.Tape, h *autograd.Var, blk *Block) (*autograd.Var, error) {
	return t.FirstRows(h, blk.NumDst)
}

func (c *SAGEConv) forward(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (*autograd.Var, error) {
	self, neigh, bias, err := c.parts(t, x, xs, blk)
	if err != nil {
		return nil, err
	}
	return t.BiasActDropout(self, neigh, bias, false, 0, 0)
}

// parts returns the layer's two products and its bias, whose sum is the
// output: the caller adds them in one op with what follows (activation,
// the next layer's dropout).
func (c *SAGEConv) parts(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (self, neigh, bias *autograd.Var, err error) {
	if err := checkInput("SAGEConv", t, x, xs, blk, c.In); err != nil {
		return nil, nil, nil, err
	}
	wbuf, err := blk.MeanWeights()
	if err != nil {
		return nil, nil, nil, err
	}
	mean, err := t.Const(wbuf, blk.NNZ(), 1)
	if err != nil {
		return nil, nil, nil, err
	}
	vs, err := vars(t, c.WSelf, c.WNeigh, c.B)
	if err != nil {
		return nil, nil, nil, err
	}
	if cat, err := c.concatProduct(t, x, xs, blk, mean); cat != nil || err != nil {
		return cat, nil, vs[2], err
	}
	// The self term: only the destination rows need it (a sparse input
	// is projected whole, then its destination rows taken).
	if xs != nil {
		zs, err := project(t, x, xs, vs[0])
		if err != nil {
			return nil, nil, nil, err
		}
		if self, err = dstRows(t, zs, blk); err != nil {
			return nil, nil, nil, err
		}
	} else {
		hd, err := dstRows(t, x, blk)
		if err != nil {
			return nil, nil, nil, err
		}
		if self, err = t.MatMul(hd, vs[0]); err != nil {
			return nil, nil, nil, err
		}
	}
	if xs != nil || c.In > c.Out {
		zn, err := project(t, x, xs, vs[1])
		if err != nil {
			return nil, nil, nil, err
		}
		if neigh, err = t.SpMM(blk.A, zn, mean); err != nil {
			return nil, nil, nil, err
		}
	} else {
		agg, err := t.SpMM(blk.A, x, mean)
		if err != nil {
			return nil, nil, nil, err
		}
		if neigh, err = t.MatMul(agg, vs[1]); err != nil {
			return nil, nil, nil, err
		}
	}
	return self, neigh, vs[2], nil
}

// concatProduct is the layer's two products as one, [x_dst | mean] times
// [WSelf; WNeigh], where that applies: a dense input that needs no
// gradient (the features: no strided backward is needed), aggregation
// before the product (In <= Out) and a back end that writes both halves
// in one pass (backend.ConcatAggregator). nil, nil otherwise: the caller
// takes the two products.
func (c *SAGEConv) concatProduct(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block, mean *autograd.Var) (*autograd.Var, error) {
	if xs != nil || x.RequiresGrad || c.In > c.Out {
		return nil, nil
	}
	if _, ok := t.Backend().(backend.ConcatAggregator); !ok {
		return nil, nil
	}
	w, err := stackedVar(t, c.WSelf, c.WNeigh)
	if err != nil {
		return nil, err
	}
	cat, err := t.AggregateConcat(blk.A, x, mean)
	if err != nil {
		return nil, err
	}
	return t.MatMul(cat, w)
}

// ---------------------------------------------------------------- GATConv

// GATConv is multi-head graph attention (Velickovic et al. 2018), with
// self-loops added as in PyG's GATConv:
//
//	z_j     = h_j W                              (H heads of D)
//	e_ij^h  = LeakyReLU(<a_l^h, z_j^h> + <a_r^h, z_i^h>, slope)
//	alpha   = softmax over j in N(i) u {i} of e_ij^h   (then attention dropout)
//	h_i'^h  = sum_j alpha_ij^h z_j^h
//	h_i'    = concat_h h_i'^h + b  (Concat)   or   mean_h h_i'^h + b
//
// W (In x H*D), a_l and a_r (1 x H*D, i.e. H x D) are Glorot-uniform,
// b zero (H*D or D wide).
//
// Shapes: H (NumSrc x In) -> H' (NumDst x H*D) with Concat, else NumDst x D.
type GATConv struct {
	W, AttnL, AttnR, B *Param
	In, Heads, Dim     int
	Concat             bool
	NegativeSlope      float32
	AttnDropout        float32
}

// NewGATConv makes a GATConv named name, initialized from seed.
func NewGATConv(b backend.Backend, name string, in, dim, heads int, concat bool, slope, attnDropout float32, seed uint64) (*GATConv, error) {
	if heads < 1 || dim < 1 || in < 1 {
		return nil, layerErr("GATConv", "bad shape in %d, dim %d, heads %d", in, dim, heads)
	}
	s := &paramSet{b: b, seed: seed}
	c := &GATConv{In: in, Heads: heads, Dim: dim, Concat: concat, NegativeSlope: slope, AttnDropout: attnDropout}
	c.W = s.uniform(name+".weight", in, heads*dim, glorot(in, heads*dim))
	c.AttnL = s.uniform(name+".attn_l", 1, heads*dim, glorot(heads, dim))
	c.AttnR = s.uniform(name+".attn_r", 1, heads*dim, glorot(heads, dim))
	outW := dim
	if concat {
		outW = heads * dim
	}
	c.B = s.zeros(name+".bias", 1, outW)
	return c, s.err
}

// OutDim returns the output width.
func (c *GATConv) OutDim() int {
	if c.Concat {
		return c.Heads * c.Dim
	}
	return c.Dim
}

// Params returns W, AttnL, AttnR, B.
func (c *GATConv) Params() []*Param { return []*Param{c.W, c.AttnL, c.AttnR, c.B} }

// Forward applies the layer to dense features x over blk. train enables
// attention dropout with masks keyed by seed.
func (c *GATConv) Forward(t *autograd.Tape, x *autograd.Var, blk *Block, train bool, seed uint64) (*autograd.Var, error) {
	return c.forward(t, x, nil, blk, train, seed)
}

// ForwardSparse applies the layer to a sparse feature matrix over blk.
func (c *GATConv) ForwardSparse(t *autograd.Tape, x *autograd.SparseInput, blk *Block, train bool, seed uint64) (*autograd.Var, error) {
	return c.forward(t, nil, x, blk, train, seed)
}

func (c *GATConv) forward(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *Block, train bool, seed uint64) (*autograd.Var, error) {
	if err := checkInput("GATConv", t, x, xs, blk, c.In); err != nil {
		return nil, err
	}
	loops, err := blk.WithSelfLoops()
	if err != nil {
		return nil, err
	}
	selAll, selDst, err := blk.selectors()
	if err != nil {
		return nil, err
	}
	vs, err := vars(t, c.W, c.AttnL, c.AttnR, c.B)
	if err != nil {
		return nil, err
	}
	z, err := project(t, x, xs, vs[0]) // NumSrc x H*D
	if err != nil {
		return nil, err
	}
	el, err := t.SDDMM(backend.SDDMMDot, selAll, z, vs[1], c.Heads) // NumSrc x H
	if err != nil {
		return nil, err
	}
	er, err := t.SDDMM(backend.SDDMMDot, selDst, z, vs[2], c.Heads) // NumDst x H
	if err != nil {
		return nil, err
	}
	e, err := t.SDDMM(backend.SDDMMAdd, loops.A, er, el, c.Heads) // nnz x H
	if err != nil {
		return nil, err
	}
	if e, err = t.LeakyReLU(e, c.NegativeSlope); err != nil {
		return nil, err
	}
	alpha, err := t.EdgeSoftmax(loops.A, e)
	if err != nil {
		return nil, err
	}
	if train && c.AttnDropout > 0 {
		if alpha, err = t.Dropout(alpha, c.AttnDropout, seed); err != nil {
			return nil, err
		}
	}
	h, err := t.SpMM(loops.A, z, alpha) // NumDst x H*D
	if err != nil {
		return nil, err
	}
	if !c.Concat && c.Heads > 1 {
		if h, err = c.meanHeads(t, h); err != nil {
			return nil, err
		}
	}
	return t.AddBias(h, vs[3])
}

// meanHeads averages the heads of h (N x H*D) with a product by the
// constant (H*D x D) matrix M[h*D+d, d] = 1/H.
func (c *GATConv) meanHeads(t *autograd.Tape, h *autograd.Var) (*autograd.Var, error) {
	hd := c.Heads * c.Dim
	m := make([]float32, hd*c.Dim)
	for k := 0; k < c.Heads; k++ {
		for d := 0; d < c.Dim; d++ {
			m[(k*c.Dim+d)*c.Dim+d] = 1 / float32(c.Heads)
		}
	}
	mv, err := t.Upload(m, hd, c.Dim)
	if err != nil {
		return nil, err
	}
	return t.MatMul(h, mv)
}
