package train

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// BatchSource produces sampled training batches directly on the run's
// back end, e.g. by sampling and gathering features on a GPU (package
// train/gputrain), so that a batch never passes through host memory.
type BatchSource interface {
	// Batch samples the neighborhoods of seeds for key, as
	// sample.NeighborSampler would, and returns the blocks (first layer
	// first; the last block's destinations are the seeds in order) and
	// the input features of the first block's sources (blocks[0].NumSrc
	// rows of the feature width) on the back end. release frees them;
	// call it after the step's tape is released.
	Batch(seeds []int32, key sample.Key) (blocks []*nn.Block, x backend.Buffer, release func(), err error)
	// Prefetch queues the sampling of the batch that a later Batch call
	// with the same seeds and key will return, so that it overlaps the
	// current step.
	Prefetch(seeds []int32, key sample.Key) error
	// Close releases the source.
	Close() error
}

// DropoutBatchSource is implemented by batch sources that can apply the
// model's input dropout while they gather the features (train/gputrain):
// BatchDropout is Batch with x dropped out at rate p with mask seed seed
// (backend.Dropout's rule over x's flat indices), saving a pass over the
// largest tensor of the step.
type DropoutBatchSource interface {
	BatchDropout(seeds []int32, key sample.Key, p float32, seed uint64) (blocks []*nn.Block, x backend.Buffer, release func(), err error)
}

// NewBatchSource makes a run's BatchSource: in is the in-adjacency, x the
// run's dense features (rows x cols, row-normalized when the run
// normalizes), fanouts the training fanouts (seeds' hop first).
type NewBatchSource func(b backend.Backend, in *graph.CSR, x []float32, rows, cols int, fanouts []int) (BatchSource, error)

// openSource makes Options.Batches' source for sampled training with
// dense features (sparse features keep the host path and its sparse
// first-layer product).
func (r *runner) openSource() error {
	if r.opts.Batches == nil || r.feats.Dense == nil {
		return nil
	}
	src, err := r.opts.Batches(r.b, r.in, r.feats.Dense, r.feats.Rows, r.feats.Cols, r.cfg.Fanouts)
	if err != nil {
		return &RunError{Op: "batch source", Err: err}
	}
	r.source = src
	return nil
}

// sourceStep is sampledStep with the batch from r.source: it queues the
// next batch's sampling before this step's work, computes the loss on the
// back end (nn.NLLLoss) and reads it once, after the optimizer step.
func (r *runner) sourceStep(epoch, batch int, seeds []int32) (float64, error) {
	key := sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: batch}
	stepSeed := r.cfg.DropoutSeed(epoch, batch)
	p, dseed, fuse := nn.InputDropout(r.model, stepSeed)
	ds, canDrop := r.source.(DropoutBatchSource)
	fuse = fuse && canDrop
	var blocks []*nn.Block
	var x backend.Buffer
	var release func()
	var err error
	if fuse {
		blocks, x, release, err = ds.BatchDropout(seeds, key, p, dseed)
	} else {
		blocks, x, release, err = r.source.Batch(seeds, key)
	}
	if err != nil {
		return 0, fmt.Errorf("sampling: %w", err)
	}
	defer release()
	if next := r.upcoming; len(next) > 0 {
		next = next[:min(len(next), r.cfg.BatchSize)]
		if err := r.source.Prefetch(next, sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: batch + 1}); err != nil {
			return 0, fmt.Errorf("sampling: %w", err)
		}
	}
	r.upcoming = nil
	if len(blocks) != r.cfg.Layers {
		return 0, fmt.Errorf("batch source returned %d blocks for %d layers", len(blocks), r.cfg.Layers)
	}
	t := autograd.NewTape(r.b)
	defer t.Release()
	var xv *autograd.Var
	if fuse {
		xv, err = t.ConstDropped(x, blocks[0].NumSrc, r.feats.Cols, p, dseed)
	} else {
		xv, err = t.Const(x, blocks[0].NumSrc, r.feats.Cols)
	}
	if err != nil {
		return 0, err
	}
	logits, err := r.model.Forward(t, xv, blocks, true, stepSeed)
	if err != nil {
		return 0, err
	}
	rows := make([]int32, len(seeds))
	labels := make([]int32, len(seeds))
	for i, v := range seeds {
		rows[i], labels[i] = int32(i), r.ds.Labels[v]
	}
	rowsBuf, err := upload(r.b, rows)
	if err != nil {
		return 0, err
	}
	defer r.b.Free(rowsBuf)
	labelsBuf, err := upload(r.b, labels)
	if err != nil {
		return 0, err
	}
	defer r.b.Free(labelsBuf)
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return 0, err
	}
	lossVar, err := nn.NLLLoss(t, logp, rowsBuf, labelsBuf)
	if err != nil {
		return 0, err
	}
	if err := r.opt.ZeroGrad(); err != nil {
		return 0, err
	}
	if err := t.Backward(lossVar); err != nil {
		return 0, err
	}
	if err := r.opt.Step(); err != nil {
		return 0, err
	}
	host := []float32{0}
	if err := r.b.Download(host, lossVar.Value); err != nil {
		return 0, err
	}
	loss := float64(host[0])
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
	}
	return loss, nil
}
