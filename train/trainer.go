package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Tags separating the random streams derived from the run's seed.
const (
	tagInit uint64 = iota + 1
	tagShuffle
	tagDropout
	tagEval
)

// CheckpointFile is the checkpoint's file name inside Options.CheckpointDir.
const CheckpointFile = "checkpoint.strata"

// Options are the run's environment: where it computes, logs and saves.
// None of them changes the numbers a run produces.
type Options struct {
	// Backend computes; required.
	Backend backend.Backend
	// CheckpointDir, when set, receives CheckpointFile every
	// CheckpointEvery batches (counted from the start of training, so the
	// positions do not depend on resumes), when the context is cancelled,
	// and at the end.
	CheckpointDir   string
	CheckpointEvery int
	// Resume continues from CheckpointDir's checkpoint when there is one
	// (and starts afresh when there is none). Without Resume an existing
	// checkpoint is an error rather than being overwritten.
	Resume bool
	// Log receives one line per epoch (throttled to about 25 lines for
	// long runs) and notes such as the resume point; nil for none.
	Log io.Writer
	// OnBatch, when set, is called after every optimizer step with the
	// cursor of the batch just run and its loss.
	OnBatch func(epoch, batch int, loss float64)
	// Batches, when set, makes sampled training with dense features draw
	// its batches from the source it returns (GPU sampling and feature
	// gathering: package train/gputrain) instead of sampling on the host.
	// It draws the same batches, so only device rounding differs.
	Batches NewBatchSource
	// Keep, when set, keeps the parameters of the epoch a saved model
	// holds (Keeper).
	Keep *Keeper
}

// RunError reports a failure of a run with what it was doing.
type RunError struct {
	Op  string
	Err error
}

func (e *RunError) Error() string { return "train: " + e.Op + ": " + e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// ErrInterrupted is wrapped by Run's error when the context was cancelled.
var ErrInterrupted = errors.New("interrupted")

// Run trains cfg (Mode Sampled: whole-graph training is package
// fullgraph's) on ds and returns the report. Defaults are not applied:
// start from Defaults(model). A cancelled ctx stops the run between
// batches (after saving a checkpoint when CheckpointDir is set) with an
// error wrapping ErrInterrupted.
func Run(ctx context.Context, ds *dataset.Dataset, cfg Config, opts Options) (*Report, error) {
	start := time.Now()
	r, err := newRunner(ds, cfg, opts)
	if err != nil {
		return nil, err
	}
	defer r.free()
	if err := r.restore(); err != nil {
		return nil, err
	}
	if err := r.loop(ctx); err != nil {
		return nil, err
	}
	rep := NewReport(ds, r.cfg, r.b.Name(), r.feats.RowNormalized)
	rep.ResumedFrom, rep.Epochs = r.resumed, r.history
	rep.Summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// runner holds one run's state.
type runner struct {
	cfg  Config
	opts Options
	b    backend.Backend
	ds   *dataset.Dataset
	ckpt string // checkpoint path, "" for none

	in    *graph.CSR // in-adjacency
	id    *DatasetID // cached by datasetID
	feats *Features
	x     *inputs // the features on the back end
	model nn.Model
	opt   optim.Optimizer
	eval  *Evaluator

	sampler    sample.Sampler
	source     BatchSource // Options.Batches' source, or nil
	upcoming   []int32     // seeds after the current batch, for prefetching
	numBatches int

	cursor  Cursor
	partial partialEpoch
	history []EpochRecord
	resumed *Cursor
}

// partialEpoch is the part of the current epoch already run.
type partialEpoch struct {
	BatchLosses []float64 `json:"batch_losses"`
	Seconds     float64   `json:"seconds"`
}

func newRunner(ds *dataset.Dataset, cfg Config, opts Options) (*runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mode != Sampled {
		return nil, &ConfigError{Field: "mode", Msg: fmt.Sprintf("Run trains sampled mini-batches; mode %s (the whole graph) is package fullgraph's", cfg.Mode)}
	}
	if opts.Backend == nil {
		return nil, &RunError{Op: "setup", Err: errors.New("no back end")}
	}
	if err := cfg.ResolvePrecision(opts.Backend); err != nil {
		return nil, err
	}
	if err := CheckDataset(ds); err != nil {
		return nil, err
	}
	if opts.CheckpointEvery < 0 {
		return nil, &ConfigError{Field: "checkpoint_every", Msg: fmt.Sprintf("%d is negative", opts.CheckpointEvery)}
	}
	if opts.Resume && opts.CheckpointDir == "" {
		return nil, &ConfigError{Field: "resume", Msg: "resuming needs a checkpoint directory"}
	}
	// r is freed on every early return: the returns name no result
	// (a named one would be nil by the time a deferred cleanup ran).
	r := &runner{cfg: cfg, opts: opts, b: opts.Backend, ds: ds}
	built := false
	defer func() {
		if !built {
			r.free()
		}
	}()
	var err error
	if r.ckpt, err = CheckpointPath(opts.CheckpointDir); err != nil {
		return nil, err
	}
	r.in = ds.InGraph()
	if r.feats, err = NewFeatures(ds.Features, int(ds.NumNodes()), ds.FeatDim, cfg.RowNorm); err != nil {
		return nil, &RunError{Op: "features", Err: err}
	}
	r.feats.Round(cfg.Prec())
	r.x = &inputs{b: r.b, f: r.feats}
	if r.model, err = nn.New(r.b, cfg.ModelConfig(ds.FeatDim, ds.NumClasses)); err != nil {
		return nil, &RunError{Op: "model", Err: err}
	}
	r.opt = cfg.NewOptimizer(r.b, r.model.Params())
	r.numBatches = (len(ds.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	if err := r.openSource(); err != nil {
		return nil, err
	}
	if r.sampler, err = newSampler(r.in, cfg.Fanouts); err != nil {
		return nil, &RunError{Op: "sampler", Err: err}
	}
	if r.eval, err = newEvaluator(r.x, ds, r.in, cfg.Common); err != nil {
		return nil, err
	}
	built = true
	return r, nil
}

// ModelConfig is the nn model of c for inDim features and classes
// classes; its initial weights are keyed by the seed (every trainer
// builds the same ones).
func (c *Common) ModelConfig(inDim, classes int) nn.Config {
	mc := nn.Config{
		Kind: c.Model, InDim: inDim, Hidden: c.Hidden, OutDim: classes, Layers: c.Layers,
		Heads: c.Heads, OutHeads: c.OutHeads,
		Dropout: float32(c.Dropout), InputDropout: float32(c.Dropout), AttnDropout: float32(c.AttnDrop),
		ExactDropout: true, // a zero rate is none, not nn's default
		Seed:         rng.Derive(c.Seed, tagInit),
	}
	if c.Model != GAT {
		mc.Heads, mc.OutHeads, mc.AttnDropout = 0, 0, 0
	}
	return mc
}

// NewOptimizer is c's optimizer over params: Adam (betas 0.9, 0.999,
// epsilon 1e-8) or SGD with c.Momentum, with c.WeightDecay added to the
// gradient.
func (c *Common) NewOptimizer(b backend.Backend, params []*nn.Param) optim.Optimizer {
	if c.Optimizer == "sgd" {
		return optim.NewSGD(b, params, float32(c.LR), float32(c.Momentum), float32(c.WeightDecay))
	}
	return optim.NewAdam(b, params, float32(c.LR), 0.9, 0.999, 1e-8, float32(c.WeightDecay))
}

// DropoutSeed keys the dropout masks of batch batch of epoch epoch (both
// 0-based; whole-graph training has batch 0 only).
func (c *Common) DropoutSeed(epoch, batch int) uint64 {
	return rng.Derive(c.Seed, tagDropout, uint64(epoch), uint64(batch))
}

// CheckpointPath is the checkpoint file in dir ("" for none), after
// making dir and checking, before any training, that the file can be
// written there (a checkpoint that cannot be written would otherwise fail
// at the first save).
func CheckpointPath(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", &RunError{Op: "checkpoint directory", Err: err}
	}
	path := filepath.Join(dir, CheckpointFile)
	if err := atomicfile.Check(path); err != nil {
		return "", &RunError{Op: "checkpoint directory", Err: err}
	}
	return path, nil
}

// DataError reports a dataset that cannot be trained on.
type DataError struct{ Msg string }

func (e *DataError) Error() string { return "train: dataset: " + e.Msg }

// CheckDataset returns a *DataError saying why ds cannot be trained on,
// nil if it can.
func CheckDataset(ds *dataset.Dataset) error {
	bad := func(format string, args ...any) error { return &DataError{Msg: fmt.Sprintf(format, args...)} }
	if ds == nil || ds.Graph == nil {
		return bad("no graph")
	}
	n := ds.NumNodes()
	name := ds.Name
	switch {
	case ds.Graph.NumCols != n || n < 1:
		return bad("%s: graph is %d x %d, want square and non-empty", name, n, ds.Graph.NumCols)
	case n > math.MaxInt32:
		return bad("%s: %d nodes exceed int32 IDs", name, n)
	case ds.Features == nil || ds.FeatDim <= 0:
		return bad("%s has no node features: cannot train a node classifier on it", name)
	case int64(len(ds.Features)) != n*int64(ds.FeatDim):
		return bad("%s: %d feature values for %d nodes x %d", name, len(ds.Features), n, ds.FeatDim)
	case ds.Labels == nil || ds.NumClasses <= 0:
		return bad("%s has no labels: cannot train a node classifier on it", name)
	case int64(len(ds.Labels)) != n:
		return bad("%s: %d labels for %d nodes", name, len(ds.Labels), n)
	case len(ds.Train) == 0:
		return bad("%s has no training nodes", name)
	case len(ds.Val) == 0 || len(ds.Test) == 0:
		return bad("%s needs validation and test nodes (has %d and %d)", name, len(ds.Val), len(ds.Test))
	}
	for _, s := range []struct {
		name string
		ids  []int32
	}{{"train", ds.Train}, {"val", ds.Val}, {"test", ds.Test}} {
		for i, v := range s.ids {
			if v < 0 || int64(v) >= n {
				return bad("%s: %s node %d (position %d) out of range [0, %d)", name, s.name, v, i, n)
			}
			if l := ds.Labels[v]; l < 0 || int(l) >= ds.NumClasses {
				return bad("%s: %s node %d has label %d, want [0, %d)", name, s.name, v, l, ds.NumClasses)
			}
		}
	}
	// Open validated the graph already (and more); a pass over billions
	// of edges costs seconds.
	if ds.Validated() {
		return nil
	}
	if err := ds.Graph.Validate(); err != nil {
		return bad("%s: %v", name, err)
	}
	return nil
}

func upload(b backend.Backend, v []int32) (backend.Buffer, error) {
	buf, err := b.Alloc(backend.Int32, len(v))
	if err != nil {
		return nil, &RunError{Op: "upload", Err: err}
	}
	if err := b.Upload(buf, v); err != nil {
		b.Free(buf)
		return nil, &RunError{Op: "upload", Err: err}
	}
	return buf, nil
}

func (r *runner) free() {
	b := r.b
	if r.model != nil {
		nn.FreeParams(b, r.model.Params())
	}
	if r.opt != nil {
		r.opt.Free()
	}
	if r.source != nil {
		r.source.Close()
		r.source = nil
	}
	r.eval.Close()
	if r.x != nil {
		r.x.free()
	}
	r.eval, r.x = nil, nil
}

// logf writes a line to the run's log.
func (r *runner) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

// loop runs epochs from the cursor to cfg.Epochs.
func (r *runner) loop(ctx context.Context) error {
	cfg := r.cfg
	every := LogEvery(cfg.Epochs)
	var bar *progress.Bar
	barEnd := -1 // last epoch (0-based) of the current bar's chunk
	for e := r.cursor.Epoch; e < cfg.Epochs; e++ {
		if e > barEnd {
			barEnd = min(cfg.Epochs-1, (e/every+1)*every-1)
			units := int64(barEnd-e+1) * int64(r.numBatches)
			bar = progress.New(units, fmt.Sprintf("epoch %d/%d", e+1, cfg.Epochs))
		}
		epochStart := time.Now()
		order := Shuffled(r.ds.Train, cfg.Seed, e)
		for bi := r.cursor.Batch; bi < r.numBatches; bi++ {
			if err := ctx.Err(); err != nil {
				r.partial.Seconds += time.Since(epochStart).Seconds()
				bar.Finish()
				if serr := r.save(); serr != nil {
					return serr
				}
				return &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: fmt.Errorf("%w: %v", ErrInterrupted, err)}
			}
			lo := bi * cfg.BatchSize
			r.upcoming = order[min(lo+cfg.BatchSize, len(order)):]
			loss, err := r.sampledStep(e, bi, order[lo:min(lo+cfg.BatchSize, len(order))])
			if err != nil {
				return &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: err}
			}
			r.partial.BatchLosses = append(r.partial.BatchLosses, loss)
			r.cursor.Batch = bi + 1
			bar.Add(1)
			bar.Describe(fmt.Sprintf("epoch %d/%d loss %.4f", e+1, cfg.Epochs, loss))
			if r.opts.OnBatch != nil {
				r.opts.OnBatch(e, bi, loss)
			}
			if n := r.opts.CheckpointEvery; n > 0 && r.ckpt != "" && (e*r.numBatches+bi+1)%n == 0 {
				elapsed := time.Since(epochStart).Seconds()
				r.partial.Seconds += elapsed
				err := r.save()
				r.partial.Seconds -= elapsed
				if err != nil {
					return err
				}
			}
		}
		rec := EpochRecord{Epoch: e + 1, BatchLosses: r.partial.BatchLosses, Loss: MeanLoss(r.partial.BatchLosses)}
		if cfg.Evaluates(e) {
			t0 := time.Now()
			t, err := r.eval.Run(r.model)
			if err != nil {
				return &RunError{Op: fmt.Sprintf("epoch %d evaluation", e+1), Err: err}
			}
			rec.SetEvaluation(&t)
			rec.EvalSeconds = time.Since(t0).Seconds()
		} else {
			rec.SetEvaluation(nil)
		}
		rec.Seconds = r.partial.Seconds + time.Since(epochStart).Seconds()
		if err := r.opts.Keep.Offer(&rec, e == cfg.Epochs-1, r.b, r.model.Params()); err != nil {
			return &RunError{Op: fmt.Sprintf("epoch %d", e+1), Err: err}
		}
		r.history = append(r.history, rec)
		r.cursor = Cursor{Epoch: e + 1}
		r.partial = partialEpoch{}
		if e == barEnd {
			bar.Finish()
		}
		if e == barEnd || e == 0 {
			r.logf("%s", EpochLine(&rec, cfg.Epochs))
		}
	}
	if r.ckpt != "" {
		return r.save()
	}
	return nil
}

// EpochLine is an epoch's log line: its loss, the accuracies when it was
// evaluated, and its wall time.
func EpochLine(rec *EpochRecord, epochs int) string {
	line := fmt.Sprintf("epoch %*d/%d  loss %.4f", len(fmt.Sprint(epochs)), rec.Epoch, epochs, rec.Loss)
	if !rec.EvalSkipped {
		line += fmt.Sprintf("  train %.4f  val %.4f  test %.4f", rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy)
	}
	return line + fmt.Sprintf("  (%.2fs)", rec.Seconds)
}

// LogEvery returns how many epochs share one progress bar and log line:
// every epoch up to 30 epochs, then about 25 lines per run.
func LogEvery(epochs int) int {
	if epochs <= 30 {
		return 1
	}
	return (epochs + 24) / 25
}

// MeanLoss is an epoch's loss as the trainer records it: the mean of its
// batch losses (NaN with none).
func MeanLoss(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// Shuffled returns epoch's Fisher-Yates permutation of ids under seed
// (Run's order of the training nodes; dsp/engine deals it to devices).
func Shuffled(ids []int32, seed uint64, epoch int) []int32 {
	out := append([]int32(nil), ids...)
	s := rng.NewStream(rng.Derive(seed, tagShuffle, uint64(epoch)))
	for i := len(out) - 1; i > 0; i-- {
		j := int(s.Below(uint64(i + 1)))
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// optimize computes the loss of logits' rows against labels, back-propagates
// and steps the optimizer.
func (r *runner) optimize(t *autograd.Tape, logits *autograd.Var, rows, labels backend.Buffer) (float64, error) {
	logp, err := t.LogSoftmax(logits)
	if err != nil {
		return 0, err
	}
	lossVar, loss, err := t.NLLLoss(logp, rows, labels)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, fmt.Errorf("loss is %v (diverged: lower the learning rate)", loss)
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
	return loss, nil
}

// sampledStep samples the neighborhoods of seeds and runs one training
// step on them.
func (r *runner) sampledStep(epoch, batch int, seeds []int32) (float64, error) {
	if r.source != nil {
		return r.sourceStep(epoch, batch, seeds)
	}
	mb, err := r.sampler.Sample(seeds, sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: batch})
	if err != nil {
		return 0, fmt.Errorf("sampling: %w", err)
	}
	t := autograd.NewTape(r.b)
	defer t.Release()
	logits, cleanup, err := r.x.forwardBatch(t, r.model, mb, true, r.cfg.DropoutSeed(epoch, batch))
	defer cleanup()
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
	return r.optimize(t, logits, rowsBuf, labelsBuf)
}
