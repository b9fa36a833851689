package nn

import (
	"fmt"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Dropout seeds are rng.Derive(stepSeed, layer, purpose).
const (
	seedFeature   = 0
	seedAttention = 1
)

// layerFn runs layer l on a dense or sparse input (exactly one non-nil).
type layerFn func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block, train bool, seed uint64) (*autograd.Var, error)

// stack is the shared body of the three models: per layer, dropout on the
// input, the graph layer, and the activation between layers.
type stack struct {
	cfg    Config
	params []*Param
	layer  layerFn
	act    func(t *autograd.Tape, x *autograd.Var) (*autograd.Var, error)
	// parts, when set (ReLU models), returns layer l's output as
	// a + b + bias before the bias is added (b may be nil): the forward
	// pass then adds them, applies the ReLU and the next layer's
	// dropout in one op (autograd's BiasActDropout).
	parts func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (a, b, bias *autograd.Var, err error)
}

func (s *stack) Params() []*Param { return s.params }
func (s *stack) Config() Config   { return s.cfg }

// Layered is implemented by the models New builds: their layers one at
// a time, for layer-wise inference (package infer), which computes
// every node's output of a layer before the next layer starts.
type Layered interface {
	// ForwardLayer applies layer l (0-based) without dropout to the
	// rows of x (dense) or xs (sparse: exactly one is non-nil) over blk,
	// followed by the activation between layers when l is not the last:
	// what Forward computes for that layer in evaluation.
	ForwardLayer(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (*autograd.Var, error)
	// LayerWidth returns the output width of layer l (the class count
	// for the last).
	LayerWidth(l int) int
}

func (s *stack) ForwardLayer(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (*autograd.Var, error) {
	if t == nil {
		return nil, layerErr(s.cfg.Kind, "nil tape")
	}
	if l < 0 || l >= s.cfg.Layers {
		return nil, layerErr(s.cfg.Kind, "layer %d of %d", l, s.cfg.Layers)
	}
	if (x == nil) == (xs == nil) {
		return nil, layerErr(s.cfg.Kind, "layer %d needs exactly one of a dense and a sparse input", l)
	}
	if err := blk.live(); err != nil {
		return nil, layerErr(s.cfg.Kind, "block: %v", err)
	}
	h, err := s.layer(t, l, x, xs, blk, false, 0)
	if err != nil || l == s.cfg.Layers-1 {
		return h, err
	}
	return s.act(t, h)
}

func (s *stack) LayerWidth(l int) int {
	if l < 0 || l >= s.cfg.Layers {
		return 0
	}
	if l == s.cfg.Layers-1 {
		return s.cfg.OutDim
	}
	if s.cfg.Kind == KindGAT {
		return s.cfg.Heads * s.cfg.Hidden
	}
	return s.cfg.Hidden
}

func (s *stack) Forward(t *autograd.Tape, x *autograd.Var, blocks []*Block, train bool, seed uint64) (*autograd.Var, error) {
	if x == nil {
		return nil, layerErr(s.cfg.Kind, "nil input")
	}
	return s.run(t, x, nil, nil, blocks, train, seed)
}

func (s *stack) ForwardSparse(t *autograd.Tape, x *autograd.SparseInput, blocks []*Block, train bool, seed uint64) (*autograd.Var, error) {
	if x == nil {
		return nil, layerErr(s.cfg.Kind, "nil sparse input")
	}
	return s.run(t, nil, x, nil, blocks, train, seed)
}

// run is the forward pass on a dense (x) or sparse (xs) input. hs, when
// set, is xs on the host: the input dropout then keeps the non-zeros that
// dense dropout keeps (denseMaskDropout) instead of drawing a mask over the
// non-zeros (SparseDropout).
func (s *stack) run(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, hs *autograd.HostSparse, blocks []*Block, train bool, seed uint64) (*autograd.Var, error) {
	if t == nil {
		return nil, layerErr(s.cfg.Kind, "nil tape")
	}
	if len(blocks) != s.cfg.Layers {
		return nil, layerErr(s.cfg.Kind, "%d blocks for %d layers", len(blocks), s.cfg.Layers)
	}
	for l, blk := range blocks {
		if err := blk.live(); err != nil {
			return nil, layerErr(s.cfg.Kind, "block %d: %v", l, err)
		}
		if l > 0 && blk.NumSrc != blocks[l-1].NumDst {
			return nil, layerErr(s.cfg.Kind, "block %d has %d sources but block %d has %d destinations", l, blk.NumSrc, l-1, blocks[l-1].NumDst)
		}
	}
	// bfloat16 activations (Tape.SetActivations) where every op of the
	// forward pass takes them: the fused chain of a dense input (SAGE,
	// GCN). Other models and sparse inputs run this pass in float32.
	half := t.Activations() == backend.BFloat16
	if half && (s.parts == nil || xs != nil) {
		t.SetActivations(backend.Float32)
		defer t.SetActivations(backend.BFloat16)
		half = false
	}
	h := x
	dropped := false // the fused op of the layer before applied this layer's dropout
	for l, blk := range blocks {
		p := s.cfg.Dropout
		if l == 0 {
			p = s.cfg.InputDropout
		}
		if dropped {
			p = 0
		}
		fseed := rng.Derive(seed, uint64(l), seedFeature)
		aseed := rng.Derive(seed, uint64(l), seedAttention)
		var err error
		if s.parts != nil && (l > 0 || xs == nil) {
			if train && p > 0 {
				if h, err = t.Dropout(h, p, fseed); err != nil {
					return nil, err
				}
			}
			if half && l == 0 {
				// The input (dropped out above, in float32, unless
				// that was fused into its gather) as bfloat16.
				if h, err = t.ToActivations(h); err != nil {
					return nil, err
				}
			}
			a, b, bias, err := s.parts(t, l, h, nil, blk)
			if err != nil {
				return nil, err
			}
			last := l == len(blocks)-1
			var pn float32
			var nseed uint64
			if !last && train {
				pn, nseed = s.cfg.Dropout, rng.Derive(seed, uint64(l+1), seedFeature)
			}
			dt := t.Activations()
			if last {
				dt = backend.Float32 // logits for LogSoftmax and the losses
			}
			if h, err = t.BiasActDropoutAs(dt, a, b, bias, !last, pn, nseed); err != nil {
				return nil, err
			}
			dropped = pn > 0
			continue
		}
		dropped = false
		if l == 0 && xs != nil {
			in := xs
			if train && p > 0 {
				if hs != nil {
					in, err = denseMaskDropout(t, xs, hs, p, fseed)
				} else {
					in, err = t.SparseDropout(xs, p, fseed)
				}
				if err != nil {
					return nil, err
				}
			}
			h, err = s.layer(t, l, nil, in, blk, train, aseed)
		} else {
			if train && p > 0 {
				if h, err = t.Dropout(h, p, fseed); err != nil {
					return nil, err
				}
			}
			h, err = s.layer(t, l, h, nil, blk, train, aseed)
		}
		if err != nil {
			return nil, err
		}
		if l < len(blocks)-1 {
			if h, err = s.act(t, h); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

func layerName(l int) string { return fmt.Sprintf("layer%d", l) }

// dims returns the input and output width of layer l for single-head models.
func dims(cfg Config, l int) (in, out int) {
	in, out = cfg.Hidden, cfg.Hidden
	if l == 0 {
		in = cfg.InDim
	}
	if l == cfg.Layers-1 {
		out = cfg.OutDim
	}
	return in, out
}

func relu(t *autograd.Tape, x *autograd.Var) (*autograd.Var, error) { return t.ReLU(x) }

func newGCN(b backend.Backend, cfg Config) (Model, error) {
	convs := make([]*GCNConv, cfg.Layers)
	var ps []*Param
	for l := range convs {
		in, out := dims(cfg, l)
		c, err := NewGCNConv(b, layerName(l), in, out, rng.Derive(cfg.Seed, uint64(l)))
		if err != nil {
			FreeParams(b, ps)
			return nil, err
		}
		convs[l] = c
		ps = append(ps, c.Params()...)
	}
	return &stack{cfg: cfg, params: ps, act: relu,
		layer: func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block, _ bool, _ uint64) (*autograd.Var, error) {
			return convs[l].forward(t, x, xs, blk)
		},
		parts: func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (a, b, bias *autograd.Var, err error) {
			a, bias, err = convs[l].parts(t, x, xs, blk)
			return a, nil, bias, err
		}}, nil
}

func newSAGE(b backend.Backend, cfg Config) (Model, error) {
	convs := make([]*SAGEConv, cfg.Layers)
	var ps []*Param
	for l := range convs {
		in, out := dims(cfg, l)
		c, err := NewSAGEConv(b, layerName(l), in, out, rng.Derive(cfg.Seed, uint64(l)))
		if err != nil {
			FreeParams(b, ps)
			return nil, err
		}
		convs[l] = c
		ps = append(ps, c.Params()...)
	}
	return &stack{cfg: cfg, params: ps, act: relu,
		layer: func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block, _ bool, _ uint64) (*autograd.Var, error) {
			return convs[l].forward(t, x, xs, blk)
		},
		parts: func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block) (a, b, bias *autograd.Var, err error) {
			return convs[l].parts(t, x, xs, blk)
		}}, nil
}

func newGAT(b backend.Backend, cfg Config) (Model, error) {
	convs := make([]*GATConv, cfg.Layers)
	var ps []*Param
	in := cfg.InDim
	for l := range convs {
		var c *GATConv
		var err error
		seed := rng.Derive(cfg.Seed, uint64(l))
		if l < cfg.Layers-1 {
			c, err = NewGATConv(b, layerName(l), in, cfg.Hidden, cfg.Heads, true, cfg.NegativeSlope, cfg.AttnDropout, seed)
		} else {
			c, err = NewGATConv(b, layerName(l), in, cfg.OutDim, cfg.OutHeads, false, cfg.NegativeSlope, cfg.AttnDropout, seed)
		}
		if err != nil {
			FreeParams(b, ps)
			return nil, err
		}
		convs[l] = c
		ps = append(ps, c.Params()...)
		in = c.OutDim()
	}
	elu := func(t *autograd.Tape, x *autograd.Var) (*autograd.Var, error) { return t.ELU(x, 1) }
	return &stack{cfg: cfg, params: ps, act: elu,
		layer: func(t *autograd.Tape, l int, x *autograd.Var, xs *autograd.SparseInput, blk *Block, train bool, seed uint64) (*autograd.Var, error) {
			return convs[l].forward(t, x, xs, blk, train, seed)
		}}, nil
}

// InputDropout returns the dropout that m's Forward applies to its dense
// input in training with step seed seed (rate p, mask seed mseed), with
// ok set when m is a model of New with p > 0: it applies that dropout with
// autograd's Tape.Dropout to the input itself, so an input gathered with
// the same dropout applied (backend.Fused.GatherRowsDropout,
// feature.Store.GatherDropout) and wrapped with Tape.ConstDropped is not
// dropped twice. Other models report ok false: gather plainly for them.
func InputDropout(m Model, seed uint64) (p float32, mseed uint64, ok bool) {
	s, isStack := m.(*stack)
	if !isStack || s.cfg.InputDropout == 0 {
		return 0, 0, false
	}
	return s.cfg.InputDropout, rng.Derive(seed, 0, seedFeature), true
}

// BF16Activations reports whether m's training forward pass can store
// its activations as bfloat16 (autograd's Tape.SetActivations): the
// models of New whose layers are the fused chain (SAGE, GCN) on a dense
// input. Trainers at bf16 turn a tape's bfloat16 activations on only
// for these; the others (GAT, sparse inputs) would run in float32
// anyway.
func BF16Activations(m Model) bool {
	s, ok := m.(*stack)
	return ok && s.parts != nil
}
