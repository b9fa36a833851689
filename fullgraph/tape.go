package fullgraph

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/tensor/backend"
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

// runTape trains on one device with the nn layers on an autograd tape.
func runTape(ctx context.Context, pr *prepared, cfg *Config, opts Options) (rep *Report, err error) {
	b := newMeter(opts.Backends[0])
	ds := pr.ds
	blk, err := nn.UploadGraph(b, pr.in)
	if err != nil {
		return nil, err
	}
	defer blk.Free()
	// Build the block's cached weights now, so they are not counted as
	// the first layer's activations.
	switch cfg.Model {
	case GCN:
		_, err = blk.GCNWeights()
	case SAGE:
		_, err = blk.MeanWeights()
	case GAT:
		_, err = blk.WithSelfLoops()
	}
	if err != nil {
		return nil, err
	}
	var xs *autograd.SparseInput
	var xd backend.Buffer
	if h := pr.feats.sparse; h != nil {
		if xs, err = autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values); err != nil {
			return nil, err
		}
		defer xs.Free(b)
	} else {
		if xd, err = upload(b, pr.feats.dense); err != nil {
			return nil, err
		}
		defer b.Free(xd)
	}
	m, err := newTapeModel(b, cfg, ds.FeatDim, ds.NumClasses, rng.Derive(cfg.Seed, tagInit))
	if err != nil {
		return nil, err
	}
	defer nn.FreeParams(b, m.params)
	opt := optim.NewAdam(b, m.params, float32(cfg.LR), 0.9, 0.999, 1e-8, float32(cfg.WeightDecay))
	defer opt.Free()
	labels := make([]int32, len(ds.Train))
	for i, v := range ds.Train {
		labels[i] = ds.Labels[v]
	}
	rows, err := uploadI32(b, ds.Train)
	if err != nil {
		return nil, err
	}
	defer b.Free(rows)
	lab, err := uploadI32(b, labels)
	if err != nil {
		return nil, err
	}
	defer b.Free(lab)
	n := int(ds.NumNodes())

	rep = newReport(pr, cfg, opts, "tape")
	act := make([]int64, len(m.layers))
	run := func(train bool, seed uint64, measure bool) (*autograd.Tape, *autograd.Var, error) {
		t := autograd.NewTape(b)
		var x *autograd.Var
		var err error
		if xd != nil {
			if x, err = t.Const(xd, n, ds.FeatDim); err != nil {
				return t, nil, err
			}
		}
		var after func(int)
		if measure {
			prev := b.Live()
			after = func(l int) {
				now := b.Live()
				act[l] = now - prev
				prev = now
			}
		}
		out, err := m.forward(t, x, xs, blk, train, seed, after)
		return t, out, err
	}
	sets := [3]evalSet{}
	for i, set := range [][]int32{ds.Train, ds.Val, ds.Test} {
		sets[i] = evalSet{local: set, total: len(set)}
		for _, v := range set {
			sets[i].labels = append(sets[i].labels, ds.Labels[v])
		}
	}
	el := newEpochLog(cfg.Epochs, opts.Log)
	for e := 0; e < cfg.Epochs; e++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fullgraph: %w: %v", ErrInterrupted, err)
		}
		el.start(e)
		t0 := time.Now()
		loss, err := func() (float64, error) {
			t, logits, err := run(true, rng.Derive(cfg.Seed, tagDropout, uint64(e)), e == 0)
			defer t.Release()
			if err != nil {
				return 0, err
			}
			logp, err := t.LogSoftmax(logits)
			if err != nil {
				return 0, err
			}
			lv, loss, err := t.NLLLoss(logp, rows, lab)
			if err != nil {
				return 0, err
			}
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return 0, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
			}
			if err := opt.ZeroGrad(); err != nil {
				return 0, err
			}
			if err := t.Backward(lv); err != nil {
				return 0, err
			}
			return loss, opt.Step()
		}()
		if err != nil {
			return nil, &RunError{Rank: 0, Op: fmt.Sprintf("epoch %d", e+1), Err: err}
		}
		rec := EpochRecord{Epoch: e + 1, Loss: loss, Seconds: time.Since(t0).Seconds(), EpsScale: 1}
		if (e+1)%cfg.EvalEvery == 0 || e == cfg.Epochs-1 {
			t1 := time.Now()
			r, err := func() (evalResult, error) {
				t, logits, err := run(false, 0, false)
				defer t.Release()
				if err != nil {
					return evalResult{}, err
				}
				host := make([]float32, logits.Len())
				if err := b.Download(host, logits.Value); err != nil {
					return evalResult{}, err
				}
				var r evalResult
				for i := range sets {
					c, l := score(host, ds.NumClasses, sets[i].local, sets[i].labels, i == 1)
					r.acc[i] = float64(c) / float64(sets[i].total)
					if i == 1 {
						r.valLoss = l / float64(sets[i].total)
					}
				}
				return r, nil
			}()
			if err != nil {
				return nil, &RunError{Rank: 0, Op: fmt.Sprintf("epoch %d evaluation", e+1), Err: err}
			}
			rec.Evaluated = true
			rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy, rec.ValLoss = r.acc[0], r.acc[1], r.acc[2], r.valLoss
			rec.EvalSeconds = time.Since(t1).Seconds()
		}
		rep.Epochs = append(rep.Epochs, rec)
		el.done(e, &rec, 0)
		if opts.OnEpoch != nil {
			opts.OnEpoch(rec)
		}
	}
	rep.Memory = MemoryStats{ActivationBytes: act, PeakBytes: []int64{b.Peak()}, CacheBytes: []int64{0},
		GraphBytes: []int64{b.SparseBytes()}}
	rep.summarize()
	return rep, nil
}
