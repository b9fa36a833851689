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

// batchSource draws a runner's training batches, each ready for the
// model the source feeds: the host sampler's (samplerSource), an
// Options.Batches source's (deviceSource) or the typed sampler's
// (typedSource). The runner's step is the same for all of them.
type batchSource interface {
	// next samples the neighborhoods of seeds for key.
	next(seeds []int32, key sample.Key) (batch, error)
	// prefetch queues a later next's sampling (a no-op on the host).
	prefetch(seeds []int32, key sample.Key) error
	// deviceLoss says whether the step computes its loss on the back end
	// and reads it once, after the optimizer step (no host round trip
	// inside the step), rather than on the tape.
	deviceLoss() bool
	close()
}

// batch is one drawn batch.
type batch interface {
	// forward runs the source's model on the batch; the output's rows
	// are the seeds in order.
	forward(t *autograd.Tape, train bool, seed uint64) (*autograd.Var, error)
	// release frees what the batch uploaded; call it after the tape is
	// released.
	release()
}

// openSource makes the run's batch source for model: Options.Batches'
// source for dense features, else the host sampler (sparse features keep
// the host path and its sparse first-layer product).
func (r *runner) openSource(model nn.Model) (batchSource, error) {
	if r.opts.Batches == nil || r.feats.Dense == nil {
		smp, err := newSampler(r.in, r.cfg.Fanouts)
		if err != nil {
			return nil, &RunError{Op: "sampler", Err: err}
		}
		return &samplerSource{smp: smp, x: r.x, model: model}, nil
	}
	src, err := r.opts.Batches(r.b, r.in, r.feats.Dense, r.feats.Rows, r.feats.Cols, r.cfg.Fanouts)
	if err != nil {
		return nil, &RunError{Op: "batch source", Err: err}
	}
	return &deviceSource{src: src, model: model, layers: r.cfg.Layers, cols: r.feats.Cols, dropSeed: r.cfg.DropoutSeed}, nil
}

// samplerSource samples on the host and uploads a batch's blocks and
// features as the model reads them (inputs.forwardBatch).
type samplerSource struct {
	smp   sample.Sampler
	x     *inputs
	model nn.Model
}

type samplerBatch struct {
	s       *samplerSource
	mb      *sample.MiniBatch
	cleanup func()
}

func (s *samplerSource) next(seeds []int32, key sample.Key) (batch, error) {
	mb, err := s.smp.Sample(seeds, key)
	if err != nil {
		return nil, err
	}
	return &samplerBatch{s: s, mb: mb}, nil
}

func (s *samplerSource) prefetch([]int32, sample.Key) error { return nil }
func (s *samplerSource) deviceLoss() bool                   { return false }
func (s *samplerSource) close()                             {}

func (b *samplerBatch) forward(t *autograd.Tape, train bool, seed uint64) (*autograd.Var, error) {
	out, cleanup, err := b.s.x.forwardBatch(t, b.s.model, b.mb, train, seed)
	b.cleanup = cleanup
	return out, err
}

func (b *samplerBatch) release() {
	if b.cleanup != nil {
		b.cleanup()
	}
}

// deviceSource is an Options.Batches source: blocks and features already
// on the back end, the next batch's sampling queued during the step.
type deviceSource struct {
	src          BatchSource
	model        nn.Model
	layers, cols int
	dropSeed     func(epoch, batch int) uint64 // a step's dropout seed (Config.DropoutSeed)
}

type deviceBatch struct {
	s      *deviceSource
	blocks []*nn.Block
	x      backend.Buffer
	free   func()
	// p and seed: the input dropout the source applied while gathering x
	// (p 0: none), which the model then does not apply again.
	p    float32
	seed uint64
}

// next draws a training batch; where the source can, the model's input
// dropout is applied in the gather (DropoutBatchSource), saving a pass
// over the step's largest tensor.
func (s *deviceSource) next(seeds []int32, key sample.Key) (batch, error) {
	if ds, ok := s.src.(DropoutBatchSource); ok && s.dropSeed != nil {
		if p, seed, fuse := nn.InputDropout(s.model, s.dropSeed(key.Epoch, key.Batch)); fuse {
			blocks, x, release, err := ds.BatchDropout(seeds, key, p, seed)
			if err != nil {
				return nil, err
			}
			return &deviceBatch{s: s, blocks: blocks, x: x, free: release, p: p, seed: seed}, nil
		}
	}
	blocks, x, release, err := s.src.Batch(seeds, key)
	if err != nil {
		return nil, err
	}
	return &deviceBatch{s: s, blocks: blocks, x: x, free: release}, nil
}

func (s *deviceSource) prefetch(seeds []int32, key sample.Key) error {
	return s.src.Prefetch(seeds, key)
}
func (s *deviceSource) deviceLoss() bool { return true }
func (s *deviceSource) close()           { s.src.Close() }

func (b *deviceBatch) forward(t *autograd.Tape, train bool, seed uint64) (*autograd.Var, error) {
	if len(b.blocks) != b.s.layers {
		return nil, fmt.Errorf("batch source returned %d blocks for %d layers", len(b.blocks), b.s.layers)
	}
	var xv *autograd.Var
	var err error
	if b.p > 0 {
		if !train {
			return nil, fmt.Errorf("batch gathered with input dropout run in evaluation")
		}
		xv, err = t.ConstDropped(b.x, b.blocks[0].NumSrc, b.s.cols, b.p, b.seed)
	} else {
		xv, err = t.Const(b.x, b.blocks[0].NumSrc, b.s.cols)
	}
	if err != nil {
		return nil, err
	}
	return b.s.model.Forward(t, xv, b.blocks, train, seed)
}

func (b *deviceBatch) release() { b.free() }

// sampledStep draws the batch of seeds, queues the next batch's sampling
// before this step's work, and runs one training step: the cross-entropy
// of the seeds' labels, back-propagated, and the optimizer's step.
func (r *runner) sampledStep(epoch, bi int, seeds []int32) (float64, error) {
	key := sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: bi}
	mb, err := r.src.next(seeds, key)
	if err != nil {
		return 0, fmt.Errorf("sampling: %w", err)
	}
	defer mb.release()
	if next := r.upcoming; len(next) > 0 {
		next = next[:min(len(next), r.cfg.BatchSize)]
		if err := r.src.prefetch(next, sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: bi + 1}); err != nil {
			return 0, fmt.Errorf("sampling: %w", err)
		}
	}
	r.upcoming = nil
	t := autograd.NewTape(r.b)
	defer t.Release()
	if m, ok := r.model.(nn.Model); ok && r.cfg.Prec() == backend.BF16 && nn.BF16Activations(m) {
		// bfloat16 activations where the back end has them (else the
		// tape stays float32).
		t.SetActivations(backend.BFloat16)
	}
	if r.warming() {
		r.setWarming(true) // off again in reduce
	}
	logits, err := mb.forward(t, true, r.cfg.DropoutSeed(epoch, bi))
	if err != nil {
		return 0, err
	}
	rows := make([]int32, len(seeds))
	labels := make([]int32, len(seeds))
	for i, v := range seeds {
		rows[i], labels[i] = int32(i), r.labels[v]
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
	return r.optimize(t, logits, rowsBuf, labelsBuf, r.src.deviceLoss())
}

// optimize computes the loss of logits' rows against labels,
// back-propagates and steps the optimizer. With onDevice the loss stays
// on the back end (nn.NLLLoss) and is read once, after the step.
func (r *runner) optimize(t *autograd.Tape, logits *autograd.Var, rows, labels backend.Buffer, onDevice bool) (float64, error) {
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return 0, err
	}
	var lossVar *autograd.Var
	loss := math.NaN()
	if onDevice {
		lossVar, err = nn.NLLLoss(t, logp, rows, labels)
	} else {
		lossVar, loss, err = t.NLLLoss(logp, rows, labels)
	}
	if err != nil {
		return 0, err
	}
	diverged := func(loss float64) error {
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
		}
		return nil
	}
	// Replicas check the mean loss, after the all-reduce: all of them
	// then fail at the same step rather than one leaving the others
	// waiting.
	if !onDevice && r.flat == nil {
		if err := diverged(loss); err != nil {
			return 0, err
		}
	}
	if err := r.opt.ZeroGrad(); err != nil {
		return 0, err
	}
	if err := t.Backward(lossVar); err != nil {
		return 0, err
	}
	if r.flat != nil {
		if onDevice {
			return 0, fmt.Errorf("replicas reduce a loss computed on the host")
		}
		if loss, err = r.reduce(loss); err != nil {
			return 0, err
		}
		if err := diverged(loss); err != nil {
			return 0, err
		}
	}
	if err := r.opt.Step(); err != nil {
		return 0, err
	}
	if onDevice {
		host := []float32{0}
		if err := r.b.Download(host, lossVar.Value); err != nil {
			return 0, err
		}
		loss = float64(host[0])
	}
	return loss, diverged(loss)
}
