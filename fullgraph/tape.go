package fullgraph

import (
	"context"
	"fmt"
	"math"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// tapeModel is a stack of nn layers run one at a time on an autograd
// tape, as nn's models run them, so memory can be measured per layer.
type tapeModel struct {
	kind   string
	layers []func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *nn.Block, train bool, seed uint64) (*autograd.Var, error)
	params []*nn.Param
	p      float32 // dropout on every layer's input
}

// newTapeModel builds the layers of nn.New(b, cfg) with the same names,
// shapes, order and seeds.
func newTapeModel(b backend.Backend, cfg *Config, inDim, outDim int, seed uint64) (*tapeModel, error) {
	m := &tapeModel{kind: cfg.Model, p: float32(cfg.Dropout)}
	fail := func(err error) (*tapeModel, error) {
		nn.FreeParams(b, m.params)
		return nil, err
	}
	in := inDim
	for l := 0; l < cfg.Layers; l++ {
		last := l == cfg.Layers-1
		out := cfg.Hidden
		if last {
			out = outDim
		}
		s := rng.Derive(seed, uint64(l))
		switch cfg.Model {
		case GCN:
			c, err := nn.NewGCNConv(b, layerName(l), in, out, s)
			if err != nil {
				return fail(err)
			}
			m.params = append(m.params, c.Params()...)
			m.layers = append(m.layers, func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *nn.Block, _ bool, _ uint64) (*autograd.Var, error) {
				if xs != nil {
					return c.ForwardSparse(t, xs, blk)
				}
				return c.Forward(t, x, blk)
			})
		case SAGE:
			c, err := nn.NewSAGEConv(b, layerName(l), in, out, s)
			if err != nil {
				return fail(err)
			}
			m.params = append(m.params, c.Params()...)
			m.layers = append(m.layers, func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *nn.Block, _ bool, _ uint64) (*autograd.Var, error) {
				if xs != nil {
					return c.ForwardSparse(t, xs, blk)
				}
				return c.Forward(t, x, blk)
			})
		case GAT:
			c, err := newGATConv(b, cfg, l, in, outDim, s)
			if err != nil {
				return fail(err)
			}
			out = c.OutDim()
			m.params = append(m.params, c.Params()...)
			m.layers = append(m.layers, func(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *nn.Block, train bool, seed uint64) (*autograd.Var, error) {
				if xs != nil {
					return c.ForwardSparse(t, xs, blk, train, seed)
				}
				return c.Forward(t, x, blk, train, seed)
			})
		}
		in = out
	}
	return m, nil
}

// forward runs the stack as nn's models do: dropout on each layer's
// input (sparse dropout on sparse features), the layer, and ReLU (ELU for
// GAT) between layers. live, when set, is called after each layer.
func (m *tapeModel) forward(t *autograd.Tape, x *autograd.Var, xs *autograd.SparseInput, blk *nn.Block, train bool, seed uint64, after func(l int)) (*autograd.Var, error) {
	h := x
	for l, layer := range m.layers {
		fseed := rng.Derive(seed, uint64(l), seedFeature)
		aseed := rng.Derive(seed, uint64(l), seedAttention)
		var err error
		if l == 0 && xs != nil {
			in := xs
			if train && m.p > 0 {
				if in, err = t.SparseDropout(xs, m.p, fseed); err != nil {
					return nil, err
				}
			}
			h, err = layer(t, nil, in, blk, train, aseed)
		} else {
			if train && m.p > 0 {
				if h, err = t.Dropout(h, m.p, fseed); err != nil {
					return nil, err
				}
			}
			h, err = layer(t, h, nil, blk, train, aseed)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		if l < len(m.layers)-1 {
			if m.kind == GAT {
				h, err = t.ELU(h, 1)
			} else {
				h, err = t.ReLU(h)
			}
			if err != nil {
				return nil, err
			}
		}
		if after != nil {
			after(l)
		}
	}
	return h, nil
}

// tapeReplica is the tape engine's one device: the nn layers on an
// autograd tape.
type tapeReplica struct {
	cfg    *Config
	b      *meter
	m      *tapeModel
	opt    optim.Optimizer
	blk    *nn.Block
	xs     *autograd.SparseInput
	xd     backend.Buffer
	rows   backend.Buffer // the training nodes
	labels backend.Buffer // and their labels
	n, dim int
	splits *[3]train.Labeled
	act    []int64 // activation bytes kept by each layer (first step)
	stats  CommStats
}

func newTapeReplica(pr *prepared, cfg *Config, b0 backend.Backend) (_ *tapeReplica, err error) {
	b := newMeter(b0)
	ds := pr.ds
	r := &tapeReplica{cfg: cfg, b: b, n: int(ds.NumNodes()), dim: ds.FeatDim, splits: train.DatasetSplits(ds)}
	defer func() {
		if err != nil {
			r.free()
		}
	}()
	if r.blk, err = nn.UploadGraph(b, pr.in); err != nil {
		return nil, err
	}
	// Build the block's cached weights now, so they are not counted as
	// the first layer's activations.
	switch cfg.Model {
	case GCN:
		_, err = r.blk.GCNWeights()
	case SAGE:
		_, err = r.blk.MeanWeights()
	case GAT:
		_, err = r.blk.WithSelfLoops()
	}
	if err != nil {
		return nil, err
	}
	if h := pr.feats.Sparse; h != nil {
		if r.xs, err = autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values); err != nil {
			return nil, err
		}
	} else if r.xd, err = upload(b, pr.feats.Dense); err != nil {
		return nil, err
	}
	if r.m, err = newTapeModel(b, cfg, ds.FeatDim, ds.NumClasses, cfg.ModelConfig(ds.FeatDim, ds.NumClasses).Seed); err != nil {
		return nil, err
	}
	r.opt = cfg.NewOptimizer(b, r.m.params)
	tr := &r.splits[train.SplitTrain]
	if r.rows, err = uploadI32(b, tr.Rows); err != nil {
		return nil, err
	}
	if r.labels, err = uploadI32(b, tr.Labels); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *tapeReplica) free() {
	b := r.b
	if r.opt != nil {
		r.opt.Free()
	}
	if r.m != nil {
		nn.FreeParams(b, r.m.params)
	}
	if r.blk != nil {
		r.blk.Free()
	}
	r.xs.Free(b)
	for _, x := range []backend.Buffer{r.xd, r.rows, r.labels} {
		b.Free(x)
	}
	*r = tapeReplica{b: b}
}

// forward runs the model over the whole graph on a new tape (release
// it); measure records the activation bytes of every layer.
func (r *tapeReplica) forward(train bool, seed uint64, measure bool) (*autograd.Tape, *autograd.Var, error) {
	t := autograd.NewTape(r.b)
	var x *autograd.Var
	var err error
	if r.xd != nil {
		if x, err = t.Const(r.xd, r.n, r.dim); err != nil {
			return t, nil, err
		}
	}
	var after func(int)
	if measure {
		r.act = make([]int64, len(r.m.layers))
		prev := r.b.Live()
		after = func(l int) {
			now := r.b.Live()
			r.act[l] = now - prev
			prev = now
		}
	}
	out, err := r.m.forward(t, x, r.xs, r.blk, train, seed, after)
	return t, out, err
}

func (r *tapeReplica) grads(epoch int, _ float64) (float64, EpochComm, error) {
	ec := EpochComm{Epoch: epoch + 1, EpsScale: 1}
	t, logits, err := r.forward(true, r.cfg.DropoutSeed(epoch, 0), r.act == nil)
	defer t.Release()
	if err != nil {
		return 0, ec, err
	}
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return 0, ec, err
	}
	lv, loss, err := t.NLLLoss(logp, r.rows, r.labels)
	if err != nil {
		return 0, ec, err
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, ec, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
	}
	if err := r.opt.ZeroGrad(); err != nil {
		return 0, ec, err
	}
	return loss, ec, t.Backward(lv)
}

func (r *tapeReplica) evaluate() (train.Tally, error) {
	t, logits, err := r.forward(false, 0, false)
	defer t.Release()
	if err != nil {
		return train.Tally{}, err
	}
	return train.Score(r.b, logits.Value, r.n, logits.Cols, r.splits)
}

func (r *tapeReplica) model() (backend.Backend, []*nn.Param, optim.Optimizer) {
	return r.b, r.m.params, r.opt
}
func (r *tapeReplica) comm() *CommStats { return &r.stats }

// runTape trains on one device with the nn layers on an autograd tape.
func runTape(ctx context.Context, s *session) error {
	r, err := newTapeReplica(s.pr, s.cfg, s.opts.Backends[0])
	if err != nil {
		return err
	}
	defer r.free()
	s.rep.Engine = "tape"
	if err := s.run(ctx, 0, r); err != nil {
		return firstError(ctx, []error{&RunError{Rank: 0, Op: "training", Err: err}})
	}
	s.rep.Memory = MemoryStats{ActivationBytes: r.act, PeakBytes: []int64{r.b.Peak()}, CacheBytes: []int64{0},
		GraphBytes: []int64{r.b.SparseBytes()}}
	return nil
}
