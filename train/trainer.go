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

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
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
	// TypedSampler, when set, makes RunHetero's typed samplers (a GPU's:
	// package train/gputrain's NewTyped) instead of sampling on the host.
	// They draw the same batches.
	TypedSampler NewTypedSampler
	// Keep, when set, keeps the parameters of the epoch a saved model
	// holds (Keeper).
	Keep *Keeper
	// Replica, when set, makes RunHetero one replica of a run on several
	// devices (Replica; package dsp/engine's RunHetero sets it).
	Replica *Replica
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
	if err := r.loop.Run(ctx, r); err != nil {
		return nil, err
	}
	rep := NewReport(ds, r.cfg, r.b.Name(), r.feats.RowNormalized)
	rep.ResumedFrom, rep.Epochs = r.resumed, r.history
	rep.Summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// runner holds one sampled node-classification run's state, on a
// homogeneous dataset (Run) or a typed one (RunHetero): the Task its Loop
// drives. A step draws its batch from src and runs the model on it, the
// loss is the cross-entropy of the seeds' labels; eval scores the model.
type runner struct {
	cfg  Config // a typed run's: its common settings, batch size and default fanouts
	opts Options
	b    backend.Backend
	ckpt string // checkpoint path, "" for none

	trainNodes []int32 // of the labeled type, in the dataset's order
	labels     []int32 // by node ID of that type
	model      interface{ Params() []*nn.Param }
	opt        optim.Optimizer
	src        batchSource
	eval       evaluator

	loop       Loop
	numBatches int
	order      []int32 // the current epoch's training nodes
	upcoming   []int32 // seeds after the current batch, for prefetching
	history    []EpochRecord
	resumed    *Cursor

	// A replica's (Options.Replica): its batches of the current epoch,
	// and the flat gradient buffer Replica.Reduce averages (shareGrads).
	rep      *Replica
	mine     [][]int32
	flat     backend.Buffer
	lossSlot backend.Buffer
	oldGrads []backend.Buffer
	warmed   bool // the first step's Replica.Barrier is behind

	// Homogeneous runs.
	ds    *dataset.Dataset
	in    *graph.CSR // in-adjacency
	id    *DatasetID // cached by datasetID
	feats *Features
	x     *inputs // the features on the back end
}

// evaluator scores the model a runner trains (Evaluator on a homogeneous
// dataset, typedEval on a typed one).
type evaluator interface {
	evaluate() (Tally, error)
	close()
}

// homEval is an Evaluator with the model it scores.
type homEval struct {
	ev    *Evaluator
	model nn.Model
}

func (h homEval) evaluate() (Tally, error) { return h.ev.Run(h.model) }
func (h homEval) close()                   { h.ev.Close() }

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
	r := &runner{cfg: cfg, opts: opts, b: opts.Backend, ds: ds, trainNodes: ds.Train, labels: ds.Labels}
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
	model, err := nn.New(r.b, cfg.ModelConfig(ds.FeatDim, ds.NumClasses))
	if err != nil {
		return nil, &RunError{Op: "model", Err: err}
	}
	r.model = model
	r.opt = cfg.NewOptimizer(r.b, r.model.Params())
	r.numBatches = (len(ds.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	if r.src, err = r.openSource(model); err != nil {
		return nil, err
	}
	ev, err := newEvaluator(r.x, ds, r.in, cfg.Common)
	if err != nil {
		return nil, err
	}
	r.eval = homEval{ev: ev, model: model}
	r.setLoop()
	built = true
	return r, nil
}

// setLoop sets up the run's Loop.
func (r *runner) setLoop() {
	r.loop = Loop{Epochs: r.cfg.Epochs, Batches: r.numBatches, OnBatch: r.opts.OnBatch, Log: r.opts.Log,
		CheckpointEvery: r.opts.CheckpointEvery, NoBar: !r.lead()}
	if r.ckpt != "" {
		r.loop.Save = r.save
	}
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
		r.unshareGrads(r.model.Params())
		nn.FreeParams(b, r.model.Params())
		r.model = nil
	}
	if r.opt != nil {
		r.opt.Free()
		r.opt = nil
	}
	if r.src != nil {
		r.src.close()
		r.src = nil
	}
	if r.eval != nil {
		r.eval.close()
		r.eval = nil
	}
	if r.x != nil {
		r.x.free()
		r.x = nil
	}
}

// logf writes a line to the run's log.
func (r *runner) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

// BeginEpoch shuffles the training nodes for epoch (and deals a
// replica's share of them).
func (r *runner) BeginEpoch(epoch int) error {
	r.order = Shuffled(r.trainNodes, r.cfg.Seed, epoch)
	if r.rep != nil {
		return r.deal()
	}
	return nil
}

// Step runs batch of the current epoch's order; a replica's batch i is
// global batch i*Size+Rank (its sampling key and dropout seed).
func (r *runner) Step(epoch, batch int) (float64, error) {
	if r.rep != nil {
		return r.sampledStep(epoch, batch*r.rep.Size+r.rep.Rank, r.mine[batch])
	}
	bs, order := r.cfg.BatchSize, r.order
	lo := batch * bs
	r.upcoming = order[min(lo+bs, len(order)):]
	return r.sampledStep(epoch, batch, order[lo:min(lo+bs, len(order))])
}

// EndEpoch evaluates the epoch when due, offers it to the Keeper and
// records it (replicas other than 0 have no evaluator: they record the
// losses only).
func (r *runner) EndEpoch(e int, losses []float64, seconds func() float64) (string, error) {
	rec := EpochRecord{Epoch: e + 1, BatchLosses: losses, Loss: MeanLoss(losses)}
	if r.eval != nil && r.cfg.Evaluates(e) {
		t0 := time.Now()
		t, err := r.eval.evaluate()
		if err != nil {
			return "", &RunError{Op: fmt.Sprintf("epoch %d evaluation", e+1), Err: err}
		}
		rec.SetEvaluation(&t)
		rec.EvalSeconds = time.Since(t0).Seconds()
	} else {
		rec.SetEvaluation(nil)
	}
	rec.Seconds = seconds()
	if err := r.opts.Keep.Offer(&rec, e == r.cfg.Epochs-1, r.b, r.model.Params()); err != nil {
		return "", &RunError{Op: fmt.Sprintf("epoch %d", e+1), Err: err}
	}
	r.history = append(r.history, rec)
	return EpochLine(&rec, r.cfg.Epochs), nil
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
