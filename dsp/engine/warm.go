package engine

import (
	"fmt"
	"io"

	"github.com/strata-gnn/strata/autograd"
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
// The loss is the step's: node classification's, or a task's own
// (TaskWarmer). Then the evaluations' forward pass.
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
	if pf, ok := b.(backend.ProductFamilies); ok {
		pf.WarmProducts(true)
		defer pf.WarmProducts(false)
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
	lv, done, err := d.warmLoss(t, logits)
	defer done()
	if err != nil {
		return err
	}
	if err := t.Backward(lv); err != nil {
		return err
	}
	// The evaluations' forward pass: float32 activations whatever the
	// precision (sampled evaluation's batches, layer-wise inference).
	if err := d.warmEval(x, blocks); err != nil {
		return err
	}
	if err := b.Synchronize(); err != nil {
		return err
	}
	d.warmFamilies, d.warmFallbacks, d.warmed = familiesSeen(b)
	return nil
}

// warmLoss is warm's loss on the model's output rows: the task's
// (TaskWarmer: link prediction's decoder and its products) or node
// classification's (every row labeled class 0). done, never nil, frees
// what it uploaded, after the backward pass.
func (d *device) warmLoss(t *autograd.Tape, logits *autograd.Var) (lv *autograd.Var, done func(), err error) {
	if w, ok := d.s.opts.Task.(TaskWarmer); ok && d.task != nil {
		lv, done, err = d.task.Loss(t, logits, w.WarmBatch(logits.Rows))
		if done == nil {
			done = func() {}
		}
		return lv, done, err
	}
	return d.classLoss(t, logits, make([]int32, min(logits.Rows, d.rows.Len())))
}

// warmEval runs the model's evaluation forward pass (float32
// activations, no dropout) on warm's synthetic batch; x is its input
// rows, converted to float32 when they are bfloat16.
func (d *device) warmEval(x backend.Buffer, blocks []*nn.Block) error {
	b, s := d.b, d.s
	if x.DType() != backend.Float32 {
		x32, err := b.Alloc(backend.Float32, x.Len())
		if err != nil {
			return err
		}
		defer b.Free(x32)
		x = x32
	}
	t := autograd.NewTape(b)
	defer t.Release()
	xv, err := t.Const(x, warmRows, s.dim)
	if err != nil {
		return err
	}
	_, err = d.model.Forward(t, xv, blocks, false, 0)
	return err
}

// familiesSeen returns the product families b has warmed and its
// fallbacks so far (backend.ProductFamilies); ok is false when b does not
// count them.
func familiesSeen(b backend.Backend) (families, fallbacks int, ok bool) {
	if pf, is := b.(backend.ProductFamilies); is {
		return pf.ProductFamilies()
	}
	return 0, 0, false
}

// lateFamilies says which devices met product families (or ran
// fallbacks) after the warm-up: each such first use could have waited
// for the devices while a collective was in flight.
func lateFamilies(w io.Writer, devs []*device) {
	for _, d := range devs {
		if !d.warmed {
			continue
		}
		f, fb, ok := familiesSeen(d.b)
		if !ok || (f == d.warmFamilies && fb == d.warmFallbacks) {
			continue
		}
		fmt.Fprintf(w, "rank %d: %d product families and %d fallbacks first seen after the warm-up (a kernel's first use while collectives run can stall several GPUs in one process: docs/cuda.md, Pinned GEMM algorithms)\n",
			d.rank, f-d.warmFamilies, fb-d.warmFallbacks)
	}
}
