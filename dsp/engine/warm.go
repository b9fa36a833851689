package engine

import (
	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// warmRows is the synthetic batch's size: every layer's products see
// it, whatever their size later (a product's kernels are chosen per size
// family, not per size).
const warmRows = 8

// warm runs the model forward and backward once on a synthetic batch,
// before any collective is in flight. The CUDA back end pins each
// product's algorithms per shape family and launches them for the first
// time when the family is first seen (docs/cuda.md, Pinned GEMM
// algorithms); a kernel's first use waits for the devices, which must not
// happen while another GPU's collective waits for this trainer. It
// changes no state a step reads: every step zeroes the gradients before
// its backward pass and converts the bfloat16 weights anew, the
// optimizer does not run, and the model's dropout is seeded per call.
// A task's own loss (link prediction's decoder) is not warmed.
func (d *device) warm() error {
	b, s := d.b, d.s
	n := warmRows
	dt := backend.Float32
	if d.half && !s.opts.halfConvert && !s.opts.unfused {
		dt = backend.BFloat16 // the loader's rows (LoaderConfig.BFloat16Rows)
	}
	x, err := b.Alloc(dt, n*s.dim)
	if err != nil {
		return err
	}
	defer b.Free(x)
	self := make([]int64, n+1)
	idx := make([]int32, n)
	for i := range n {
		self[i+1], idx[i] = int64(i+1), int32(i)
	}
	blocks := make([]*nn.Block, 0, s.cfg.Train.Layers)
	defer func() { nn.FreeBlocks(blocks) }()
	for range s.cfg.Train.Layers {
		k, err := nn.NewBlock(b, n, n, self, idx)
		if err != nil {
			return err
		}
		blocks = append(blocks, k)
	}
	t := autograd.NewTape(b)
	defer t.Release()
	if err := d.halfTape(t); err != nil {
		return err
	}
	// As a step: the loader applies the model's input dropout (loadOne).
	var xv *autograd.Var
	if p, seed, ok := nn.InputDropout(d.model, 0); ok && !s.opts.unfused {
		xv, err = t.ConstDropped(x, n, s.dim, p, seed)
	} else {
		xv, err = t.Const(x, n, s.dim)
	}
	if err != nil {
		return err
	}
	logits, err := d.model.Forward(t, xv, blocks, true, 0)
	if err != nil {
		return err
	}
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return err
	}
	m := min(logits.Rows, d.rows.Len())
	labels, err := devbuf.Upload(b, make([]int32, m)) // class 0
	if err != nil {
		return err
	}
	defer b.Free(labels)
	rows, err := devbuf.View(d.rows, 0, m)
	if err != nil {
		return err
	}
	lv, err := nn.NLLLoss(t, logp, rows, labels)
	if err != nil {
		return err
	}
	if err := t.Backward(lv); err != nil {
		return err
	}
	if q, ok := b.(backend.Queue); ok {
		return q.Sync()
	}
	return nil
}
