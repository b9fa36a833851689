package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Options are the run's environment; none of them changes its numbers.
type Options struct {
	// Backend computes; required.
	Backend backend.Backend
	// Log receives one line per epoch (about 25 for long runs); nil for
	// none.
	Log io.Writer
	// OnBatch, when set, is called after every optimizer step with the
	// step's position and loss.
	OnBatch func(epoch, batch int, loss float64)
	// EdgeSplit, when set, is the dataset's stored edge split
	// (split.ReadEdges of DATASET/edge_split; for RunHetero,
	// split.ReadRelationEdges of the relation), used instead of a random
	// split by Config.Split (FromEdgeSplit). It is data, as ds is: the
	// numbers follow it.
	EdgeSplit *split.EdgeSplit
	// TypedSampler, when set, makes RunHetero's typed sampler (a GPU's:
	// train/gputrain.NewTyped), whose batches equal the CPU sampler's;
	// nil samples on the host. Run does not read it.
	TypedSampler train.NewTypedSampler
	// Keep, when set, keeps the encoder's and the decoder's parameters
	// of the epoch the report selects (train.Keeper, offered each
	// evaluated epoch as EpochRecord.Selection), for a saved model
	// (RunHetero's: the typed encoder's, then the decoder's).
	Keep *train.Keeper
}

// MakeSplit is the run's split of ds: es when given (FromEdgeSplit),
// else a random split by cfg.Split.
func MakeSplit(ds *dataset.Dataset, cfg *Config, es *split.EdgeSplit) (*Split, error) {
	if es != nil {
		s, err := FromEdgeSplit(ds.Graph, es, cfg.Seed)
		if s != nil {
			s.Source = SourceStored
		}
		return s, err
	}
	s, err := NewSplit(ds.Graph, cfg.Split, cfg.Seed)
	if s != nil {
		s.Source = SourceRandom
	}
	return s, err
}

// RunError reports a failure of a run with what it was doing.
type RunError struct {
	Op  string
	Err error
}

func (e *RunError) Error() string { return "link: " + e.Op + ": " + e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// DataError reports a dataset that cannot be trained on.
type DataError struct{ Msg string }

func (e *DataError) Error() string { return "link: dataset: " + e.Msg }

// ErrInterrupted is wrapped by Run's error when the context was
// cancelled (train's: errors.Is matches either).
var ErrInterrupted = train.ErrInterrupted

// Run trains cfg on ds's graph and features (labels and node splits are
// not read) and returns the report. Defaults are not applied: start from
// Defaults(model). A cancelled ctx stops the run between steps with an
// error wrapping ErrInterrupted.
func Run(ctx context.Context, ds *dataset.Dataset, cfg Config, opts Options) (*Report, error) {
	start := time.Now()
	r, err := newRunner(ds, cfg, opts)
	if err != nil {
		return nil, err
	}
	defer r.free()
	if err := r.loop(ctx); err != nil {
		return nil, err
	}
	rep := &Report{
		Schema: ReportVersion, StrataVersion: train.Version, Task: "link", Dataset: ds.Name, Model: cfg.Model,
		Mode: cfg.Mode, Decoder: cfg.Decoder, Device: r.b.Name(), Seed: cfg.Seed, HitsK: cfg.HitsK,
		RowNormalized: r.feats.RowNormalized, Config: cfg, Epochs: r.history, Split: r.split.Stats(),
		Graph: Graph{Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), Features: ds.FeatDim},
	}
	rep.Summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// CheckDataset returns a *DataError saying why ds cannot be trained on,
// nil if it can: a valid square graph and a feature matrix.
func CheckDataset(ds *dataset.Dataset) error {
	bad := func(format string, args ...any) error { return &DataError{Msg: fmt.Sprintf(format, args...)} }
	if ds == nil || ds.Graph == nil {
		return bad("no graph")
	}
	n := ds.NumNodes()
	switch {
	case ds.Graph.NumCols != n || n < 2:
		return bad("%s: graph is %d x %d, want square with at least 2 nodes", ds.Name, n, ds.Graph.NumCols)
	case n > math.MaxInt32:
		return bad("%s: %d nodes exceed int32 IDs", ds.Name, n)
	case ds.Features == nil || ds.FeatDim <= 0:
		return bad("%s has no node features: the encoder needs them", ds.Name)
	case int64(len(ds.Features)) != n*int64(ds.FeatDim):
		return bad("%s: %d feature values for %d nodes x %d", ds.Name, len(ds.Features), n, ds.FeatDim)
	}
	if err := ds.Graph.Validate(); err != nil {
		return bad("%s: %v", ds.Name, err)
	}
	return nil
}

// runner holds one run's state.
type runner struct {
	cfg  Config
	opts Options
	b    backend.Backend
	ds   *dataset.Dataset

	split   *Split
	feats   *train.Features
	x       *train.Inputs
	model   nn.Model
	dec     Decoder
	opt     optim.Optimizer
	params  []*nn.Param
	neg     *Negatives
	sampler sample.Sampler // sampled mode
	full    *nn.Block      // the message-passing graph: full mode, full evaluation
	eval    *Evaluator

	batchSize, numBatches int
	history               []EpochRecord
}

func newRunner(ds *dataset.Dataset, cfg Config, opts Options) (*runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Backend == nil {
		return nil, &RunError{Op: "setup", Err: errors.New("no back end")}
	}
	if err := CheckDataset(ds); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, opts: opts, b: opts.Backend, ds: ds}
	built := false
	defer func() {
		if !built {
			r.free()
		}
	}()
	var err error
	if r.split, err = MakeSplit(ds, &cfg, opts.EdgeSplit); err != nil {
		return nil, err
	}
	n := int(ds.NumNodes())
	if r.feats, err = train.NewFeatures(ds.Features, n, ds.FeatDim, cfg.RowNorm); err != nil {
		return nil, &RunError{Op: "features", Err: err}
	}
	r.x = train.NewInputs(r.b, r.feats)
	if r.model, err = nn.New(r.b, cfg.ModelConfig(ds.FeatDim, cfg.Hidden)); err != nil {
		return nil, &RunError{Op: "encoder", Err: err}
	}
	if r.dec, err = cfg.NewDecoder(r.b, r.model.Config().OutDim); err != nil {
		return nil, &RunError{Op: "decoder", Err: err}
	}
	r.params = append(slices.Clone(r.model.Params()), r.dec.Params()...)
	r.opt = cfg.NewOptimizer(r.b, r.params)
	if r.neg, err = NewNegatives(r.split, &r.cfg); err != nil {
		return nil, &RunError{Op: "negative sampler", Err: err}
	}
	r.batchSize = cfg.BatchSize
	if r.batchSize == 0 {
		r.batchSize = r.split.Train.Len()
	}
	r.numBatches = (r.split.Train.Len() + r.batchSize - 1) / r.batchSize
	if cfg.Mode == train.Sampled {
		if r.sampler, err = sample.NewNeighborSampler(r.split.In, sample.Config{Fanouts: cfg.Fanouts}); err != nil {
			return nil, &RunError{Op: "sampler", Err: err}
		}
	}
	if cfg.Mode == train.Full || cfg.Eval == train.Full {
		if r.full, err = nn.UploadGraph(r.b, r.split.In); err != nil {
			return nil, &RunError{Op: "upload graph", Err: err}
		}
	}
	if r.eval, err = NewEvaluator(r.b, r.split, r.x, r.full, &r.cfg); err != nil {
		return nil, err
	}
	built = true
	return r, nil
}

func (r *runner) free() {
	if r.model != nil {
		nn.FreeParams(r.b, r.model.Params())
	}
	if r.dec != nil {
		nn.FreeParams(r.b, r.dec.Params())
	}
	if r.opt != nil {
		r.opt.Free()
	}
	if r.full != nil {
		r.full.Free()
	}
	if r.x != nil {
		r.x.Free()
	}
	r.eval.Close()
	r.eval = nil
	r.model, r.dec, r.opt, r.full, r.x = nil, nil, nil, nil, nil
}

func (r *runner) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

// loop runs the epochs.
func (r *runner) loop(ctx context.Context) error {
	cfg := r.cfg
	every := train.LogEvery(cfg.Epochs)
	var bar *progress.Bar
	barEnd := -1
	for e := 0; e < cfg.Epochs; e++ {
		if e > barEnd {
			barEnd = min(cfg.Epochs-1, (e/every+1)*every-1)
			bar = progress.New(int64(barEnd-e+1)*int64(r.numBatches), fmt.Sprintf("epoch %d/%d", e+1, cfg.Epochs))
		}
		start := time.Now()
		rec := EpochRecord{Epoch: e + 1}
		if err := r.steps(ctx, e, &rec, bar); err != nil {
			return err
		}
		rec.Loss = train.MeanLoss(rec.BatchLosses)
		rec.EvalSkipped = !cfg.Evaluates(e)
		if !rec.EvalSkipped {
			t0 := time.Now()
			var err error
			if rec.Val, rec.Test, err = r.evaluate(); err != nil {
				return &RunError{Op: fmt.Sprintf("epoch %d evaluation", e+1), Err: err}
			}
			rec.EvalSeconds = time.Since(t0).Seconds()
		}
		rec.Seconds = time.Since(start).Seconds()
		sel := rec.Selection()
		if err := r.opts.Keep.Offer(&sel, e == cfg.Epochs-1, r.b, r.params); err != nil {
			return &RunError{Op: fmt.Sprintf("epoch %d", e+1), Err: err}
		}
		r.history = append(r.history, rec)
		if e == barEnd {
			bar.Finish()
		}
		if e == barEnd || e == 0 {
			r.logf("%s", EpochLine(&rec, cfg.Epochs, cfg.HitsK))
		}
	}
	return nil
}

func (r *runner) epochEdges(epoch int) Edges { return EpochEdges(r.split, r.cfg.Seed, epoch) }

// steps runs epoch's optimizer steps into rec. The host work of each
// step (prepare) runs one step ahead on another goroutine (prefetch), so
// that it overlaps the step before on the device; it is keyed by (epoch,
// batch), so the numbers do not change.
func (r *runner) steps(ctx context.Context, e int, rec *EpochRecord, bar *progress.Bar) error {
	next, stop := r.prefetch(ctx, e)
	defer stop()
	for bi := 0; bi < r.numBatches; bi++ {
		if err := ctx.Err(); err != nil {
			bar.Finish()
			return &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: fmt.Errorf("%w: %v", ErrInterrupted, err)}
		}
		p, ok := <-next
		if !ok { // the context was cancelled while the batch was prepared
			bar.Finish()
			return &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: fmt.Errorf("%w: %v", ErrInterrupted, ctx.Err())}
		}
		loss, err := r.step(e, bi, p)
		if err != nil {
			return &RunError{Op: fmt.Sprintf("epoch %d batch %d", e+1, bi), Err: err}
		}
		rec.BatchLosses = append(rec.BatchLosses, loss)
		bar.Add(1)
		bar.Describe(fmt.Sprintf("epoch %d/%d loss %.4f", e+1, r.cfg.Epochs, loss))
		if r.opts.OnBatch != nil {
			r.opts.OnBatch(e, bi, loss)
		}
	}
	return nil
}

// prepared is a step's host work: its batch and, in sampled mode, the
// neighborhoods of its seeds without its links; or why it failed.
type prepared struct {
	batch *Batch
	mb    *sample.MiniBatch
	err   error
}

// prepare does the host work of step (epoch, bi) on positives pos: the
// negatives, the batch, and in sampled mode the sampling and the
// exclusion of the targets.
func (r *runner) prepare(epoch, bi int, pos Edges) prepared {
	neg, err := r.neg.Draw(pos, epoch, bi)
	if err != nil {
		return prepared{err: fmt.Errorf("negative sampling: %w", err)}
	}
	p := prepared{batch: NewBatch(pos, neg)}
	if r.cfg.Mode == train.Sampled {
		if p.mb, err = r.sampler.Sample(p.batch.Seeds, sample.Key{Seed: r.cfg.Seed, Epoch: epoch, Batch: bi}); err != nil {
			return prepared{err: fmt.Errorf("sampling: %w", err)}
		}
		ExcludeTargets(p.mb, pos)
	}
	return p
}

// prefetch prepares epoch's steps in order on a goroutine, at most one
// ahead of the one taken from next; next is closed after the last step,
// a failed one, or when ctx is cancelled. stop cancels the goroutine and
// waits for it to end.
func (r *runner) prefetch(ctx context.Context, epoch int) (next <-chan prepared, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch, done := make(chan prepared), make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		edges := r.epochEdges(epoch)
		for bi := 0; bi < r.numBatches; bi++ {
			lo, hi := bi*r.batchSize, min((bi+1)*r.batchSize, edges.Len())
			p := r.prepare(epoch, bi, Edges{Src: edges.Src[lo:hi], Dst: edges.Dst[lo:hi]})
			select {
			case ch <- p:
			case <-ctx.Done():
				return
			}
			if p.err != nil {
				return
			}
		}
	}()
	return ch, func() { cancel(); <-done }
}

// EpochEdges returns s's training links in epoch's order (a
// permutation keyed by seed and epoch), each undirected link in a random
// orientation: a link stored u < v would otherwise make the smaller ID
// the source of every negative drawn for it. Every trainer visits them
// in this order (the multi-device ones deal them to devices from it).
func EpochEdges(s *Split, seed uint64, epoch int) Edges {
	tr := s.Train
	n := tr.Len()
	perm := make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	st := rng.NewStream(rng.Derive(seed, tagOrder, uint64(epoch)))
	for i := n - 1; i > 0; i-- {
		j := int(st.Below(uint64(i + 1)))
		perm[i], perm[j] = perm[j], perm[i]
	}
	out := Edges{Src: make([]int32, n), Dst: make([]int32, n)}
	for i, p := range perm {
		u, v := tr.Src[p], tr.Dst[p]
		if s.Undirected && st.Uint64()&1 == 1 {
			u, v = v, u
		}
		out.Src[i], out.Dst[i] = u, v
	}
	return out
}

// NewDecoder builds the run's decoder for embeddings of width dim on b,
// its weights keyed by the seed (every trainer's and device's the same).
func (c *Config) NewDecoder(b backend.Backend, dim int) (Decoder, error) {
	return NewDecoder(b, c.Decoder, dim, rng.Derive(c.Seed, tagDecoder))
}

// step runs one optimizer step on a prepared batch (prepare).
func (r *runner) step(epoch, bi int, p prepared) (float64, error) {
	if p.err != nil {
		return 0, p.err
	}
	batch := p.batch
	t := autograd.NewTape(r.b)
	defer t.Release()
	seed := r.cfg.DropoutSeed(epoch, bi)
	var h *autograd.Var
	var err error
	src, dst := batch.Src, batch.Dst // rows of h: node IDs over the whole graph
	if r.cfg.Mode == train.Sampled {
		var cleanup func()
		h, cleanup, err = r.x.ForwardBatch(t, r.model, p.mb, true, seed)
		defer cleanup()
		if err != nil {
			return 0, err
		}
		src, dst = batch.SrcRow, batch.DstRow // rows of h: the seeds
	} else if h, err = r.x.ForwardFull(t, r.model, r.fullBlocks(), true, seed); err != nil {
		return 0, err
	}
	lv, loss, done, err := PairLoss(t, r.dec, h, src, dst, batch.Labels)
	defer done()
	if err != nil {
		return 0, err
	}
	return descend(t, r.opt, lv, loss)
}

// descend ends a training step: it refuses a diverged loss, then
// back-propagates lv and takes opt's step.
func descend(t *autograd.Tape, opt optim.Optimizer, lv *autograd.Var, loss float64) (float64, error) {
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
}

// PairLoss is a step's loss: the decoder's scores of the pairs (src[i],
// dst[i]) (rows of h) against labels (1 positive, 0 negative), by
// binary cross-entropy with logits, and its value. done (never nil)
// frees the pairs' buffers, after the backward pass.
func PairLoss(t *autograd.Tape, dec Decoder, h *autograd.Var, src, dst, labels []int32) (lv *autograd.Var, loss float64, done func(), err error) {
	b := t.Backend()
	bufs, err := uploadAll(b, src, dst, labels)
	done = func() { freeAll(b, bufs) }
	if err != nil {
		return nil, 0, done, err
	}
	scores, err := dec.Score(t, h, bufs[0], bufs[1])
	if err != nil {
		return nil, 0, done, err
	}
	lv, loss, err = t.BCEWithLogits(scores, bufs[2])
	return lv, loss, done, err
}

func (r *runner) fullBlocks() []*nn.Block {
	blocks := make([]*nn.Block, r.cfg.Layers)
	for i := range blocks {
		blocks[i] = r.full
	}
	return blocks
}

// uploadAll uploads int32 slices; the buffers are returned even on error
// so that freeAll releases those made.
func uploadAll(b backend.Backend, vs ...[]int32) ([]backend.Buffer, error) {
	var out []backend.Buffer
	for _, v := range vs {
		buf, err := b.Alloc(backend.Int32, len(v))
		if err != nil {
			return out, err
		}
		out = append(out, buf)
		if err := b.Upload(buf, v); err != nil {
			return out, err
		}
	}
	return out, nil
}

func freeAll(b backend.Backend, bufs []backend.Buffer) {
	for _, x := range bufs {
		b.Free(x)
	}
}

// evalPairs are the fixed evaluation pairs: validation positives and
// negatives, then test positives and negatives, in one list.
type evalPairs struct {
	n     [4]int // pairs of each part
	pairs Edges
	// Eval full: the pairs on the device (node IDs). Eval sampled: the
	// distinct endpoints (nodes), and the pairs as rows of nodes.
	src, dst backend.Buffer
	nodes    []int32
	smp      sample.Sampler
}

func (ev *evalPairs) prepare(b backend.Backend, s *Split, cfg *Config) error {
	parts := []Edges{s.Val, s.ValNeg, s.Test, s.TestNeg}
	for i, p := range parts {
		ev.n[i] = p.Len()
		ev.pairs.Src = append(ev.pairs.Src, p.Src...)
		ev.pairs.Dst = append(ev.pairs.Dst, p.Dst...)
	}
	src, dst := ev.pairs.Src, ev.pairs.Dst
	if cfg.Eval == train.Sampled {
		var err error
		if ev.smp, err = sample.NewNeighborSampler(s.In, sample.Config{Fanouts: cfg.EvalFanouts}); err != nil {
			return &RunError{Op: "evaluation sampler", Err: err}
		}
		ev.nodes = slices.Concat(src, dst)
		slices.Sort(ev.nodes)
		ev.nodes = slices.Compact(ev.nodes)
		row := func(v int32) int32 {
			return int32(sort.Search(len(ev.nodes), func(i int) bool { return ev.nodes[i] >= v }))
		}
		src, dst = make([]int32, len(src)), make([]int32, len(dst))
		for i := range src {
			src[i], dst[i] = row(ev.pairs.Src[i]), row(ev.pairs.Dst[i])
		}
	}
	bufs, err := uploadAll(b, src, dst)
	if len(bufs) > 0 {
		ev.src = bufs[0]
	}
	if len(bufs) > 1 {
		ev.dst = bufs[1]
	}
	if err != nil {
		return &RunError{Op: "upload evaluation pairs", Err: err}
	}
	return nil
}

func (ev *evalPairs) free(b backend.Backend) {
	freeAll(b, []backend.Buffer{ev.src, ev.dst})
	ev.src, ev.dst = nil, nil
}

// evaluate scores the fixed validation and test pairs without dropout
// and returns their metrics.
func (r *runner) evaluate() (val, test Metrics, err error) { return r.eval.Run(r.model, r.dec) }

// Evaluator scores a split's fixed validation and test pairs (and their
// negatives) with an encoder and a decoder, without dropout: over the
// whole message-passing graph (Eval "full") or over neighborhoods
// sampled from it (Eval "sampled", EvalFanouts, in batches of
// EvalBatchSize, keyed by the seed alone so that every epoch is scored
// on the same neighborhoods). Every trainer evaluates with it: the
// single-device runs, and device 0 of the multi-device ones (in their
// node IDs: a Split whose pairs and In are renumbered).
type Evaluator struct {
	b       backend.Backend
	cfg     *Config
	x       *train.Inputs
	full    *nn.Block
	ownFull bool
	ev      evalPairs
}

// NewEvaluator prepares the evaluation of s's pairs on b with the
// features x; full is s.In uploaded (nil: uploaded here when Eval is
// full). x and full stay the caller's.
func NewEvaluator(b backend.Backend, s *Split, x *train.Inputs, full *nn.Block, cfg *Config) (*Evaluator, error) {
	e := &Evaluator{b: b, cfg: cfg, x: x, full: full}
	if cfg.Eval != train.Sampled && full == nil {
		var err error
		if e.full, err = nn.UploadGraph(b, s.In); err != nil {
			return nil, &RunError{Op: "upload graph", Err: err}
		}
		e.ownFull = true
	}
	if err := e.ev.prepare(b, s, cfg); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close frees the evaluator's buffers.
func (e *Evaluator) Close() {
	if e == nil {
		return
	}
	e.ev.free(e.b)
	if e.ownFull && e.full != nil {
		e.full.Free()
	}
	e.full = nil
}

// Run scores the pairs with model and dec and returns the validation
// and test metrics.
func (e *Evaluator) Run(model nn.Model, dec Decoder) (val, test Metrics, err error) {
	var scores []float32
	if e.cfg.Eval == train.Sampled {
		scores, err = e.scoreSampled(model, dec)
	} else {
		scores, err = e.scoreFull(model, dec)
	}
	if err != nil {
		return val, test, err
	}
	return e.metrics(scores)
}

// NewPairsEvaluator prepares the evaluation of s's pairs from given
// embeddings (RunEmbeddings): a trainer that computes every node's
// embedding itself (package fullgraph's) scores them with it.
func NewPairsEvaluator(b backend.Backend, s *Split, cfg *Config) (*Evaluator, error) {
	c := *cfg
	c.Eval = train.Full
	e := &Evaluator{b: b, cfg: &c}
	if err := e.ev.prepare(b, s, &c); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// RunEmbeddings scores the pairs of a NewPairsEvaluator with dec from h,
// the embeddings of every node (rows x d, row-major, rows indexed by the
// split's node IDs), and returns the validation and test metrics.
func (e *Evaluator) RunEmbeddings(h []float32, rows, d int, dec Decoder) (val, test Metrics, err error) {
	if e.x != nil || e.cfg.Eval == train.Sampled || rows < 0 || d <= 0 || len(h) != rows*d {
		return val, test, fmt.Errorf("link: embeddings of %d values for %d x %d, or an evaluator that embeds", len(h), rows, d)
	}
	t := autograd.NewTape(e.b)
	defer t.Release()
	hv, err := t.Upload(h, rows, d)
	if err != nil {
		return val, test, err
	}
	scores, err := e.score(t, dec, hv)
	if err != nil {
		return val, test, err
	}
	return e.metrics(scores)
}

// metrics cuts the scores into the four parts and scores them.
func (e *Evaluator) metrics(scores []float32) (val, test Metrics, err error) {
	n := e.ev.n
	if len(scores) != n[0]+n[1]+n[2]+n[3] {
		return val, test, fmt.Errorf("link: %d scores for %d pairs", len(scores), n[0]+n[1]+n[2]+n[3])
	}
	at := func(i int) []float32 {
		lo := 0
		for j := range i {
			lo += n[j]
		}
		return scores[lo : lo+n[i]]
	}
	if val, err = Evaluate(at(0), at(1), e.cfg.HitsK); err != nil {
		return val, test, fmt.Errorf("validation: %w", err)
	}
	if test, err = Evaluate(at(2), at(3), e.cfg.HitsK); err != nil {
		return val, test, fmt.Errorf("test: %w", err)
	}
	return val, test, nil
}

// scoreFull embeds every node over the whole message-passing graph and
// scores the pairs.
func (e *Evaluator) scoreFull(model nn.Model, dec Decoder) ([]float32, error) {
	t := autograd.NewTape(e.b)
	defer t.Release()
	blocks := make([]*nn.Block, e.cfg.Layers)
	for i := range blocks {
		blocks[i] = e.full
	}
	h, err := e.x.ForwardFull(t, model, blocks, false, 0)
	if err != nil {
		return nil, err
	}
	return e.score(t, dec, h)
}

// scoreSampled embeds the pairs' endpoints in batches of EvalBatchSize
// over neighborhoods sampled with EvalFanouts, then scores the pairs.
func (e *Evaluator) scoreSampled(model nn.Model, dec Decoder) ([]float32, error) {
	nodes, bs := e.ev.nodes, e.cfg.EvalBatchSize
	d := model.Config().OutDim
	emb := make([]float32, len(nodes)*d)
	key := rng.Derive(e.cfg.Seed, tagEval)
	for b := 0; b*bs < len(nodes); b++ {
		seeds := nodes[b*bs : min((b+1)*bs, len(nodes))]
		mb, err := e.ev.smp.Sample(seeds, sample.Key{Seed: key, Batch: b})
		if err != nil {
			return nil, fmt.Errorf("sampling: %w", err)
		}
		if err := e.embedBatch(model, mb, emb[b*bs*d:(b*bs+len(seeds))*d]); err != nil {
			return nil, err
		}
	}
	t := autograd.NewTape(e.b)
	defer t.Release()
	h, err := t.Upload(emb, len(nodes), d)
	if err != nil {
		return nil, err
	}
	return e.score(t, dec, h)
}

// embedBatch writes the embeddings of mb's seeds into dst.
func (e *Evaluator) embedBatch(model nn.Model, mb *sample.MiniBatch, dst []float32) error {
	t := autograd.NewTape(e.b)
	defer t.Release()
	h, cleanup, err := e.x.ForwardBatch(t, model, mb, false, 0)
	defer cleanup()
	if err != nil {
		return err
	}
	if h.Len() != len(dst) {
		return fmt.Errorf("encoder produced %dx%d embeddings for %d seeds", h.Rows, h.Cols, len(mb.Seeds))
	}
	return e.b.Download(dst, h.Value)
}

// scoreChunkBytes bounds the device memory one chunk of evaluation pairs
// takes (its endpoints' rows and their product): all the pairs at once
// would take 3 x pairs x dim floats, 19 GB for the products shape's 6.2M
// test links and their negatives.
var scoreChunkBytes = 1 << 30

// score decodes the evaluation pairs (rows of h) in chunks of at most
// scoreChunkBytes and downloads the scores.
func (e *Evaluator) score(t *autograd.Tape, dec Decoder, h *autograd.Var) ([]float32, error) {
	n := e.ev.src.Len()
	out := make([]float32, n)
	chunk := max(1, scoreChunkBytes/(3*4*max(h.Cols, 1)))
	sl, ok := e.ev.src.(backend.Slicer)
	if !ok || n <= chunk {
		s, err := dec.Score(t, h, e.ev.src, e.ev.dst)
		if err != nil {
			return nil, err
		}
		if s.Len() != n {
			return nil, fmt.Errorf("decoder produced %d scores for %d pairs", s.Len(), n)
		}
		return out, e.b.Download(out, s.Value)
	}
	dl := e.ev.dst.(backend.Slicer)
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		src, err := sl.Slice(lo, hi-lo)
		if err != nil {
			return nil, err
		}
		dst, err := dl.Slice(lo, hi-lo)
		if err != nil {
			return nil, err
		}
		// A tape per chunk frees the chunk's rows before the next; h
		// (owned by t) enters it as a constant.
		ct := autograd.NewTape(e.b)
		var s *autograd.Var
		hc, err := ct.Const(h.Value, h.Rows, h.Cols)
		if err == nil {
			s, err = dec.Score(ct, hc, src, dst)
		}
		if err == nil && s.Len() != hi-lo {
			err = fmt.Errorf("decoder produced %d scores for %d pairs", s.Len(), hi-lo)
		}
		if err == nil {
			err = e.b.Download(out[lo:hi], s.Value)
		}
		ct.Release()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ScoreRows scores the pairs (src[i], dst[i]), rows of h (the
// embeddings, rows x d, row-major), with dec on b, in the chunks
// evaluation scores in: the decoder's logits ('strata predict --pairs').
func ScoreRows(b backend.Backend, dec Decoder, h []float32, rows, d int, src, dst []int32) ([]float32, error) {
	if rows < 1 || d <= 0 || len(h) != rows*d || len(src) != len(dst) {
		return nil, fmt.Errorf("link: %d embedding values for %d x %d, %d sources and %d destinations", len(h), rows, d, len(src), len(dst))
	}
	for i := range src {
		if src[i] < 0 || int(src[i]) >= rows || dst[i] < 0 || int(dst[i]) >= rows {
			return nil, fmt.Errorf("link: pair %d (%d, %d) is not in the %d rows", i, src[i], dst[i], rows)
		}
	}
	bufs, err := uploadAll(b, src, dst)
	defer freeAll(b, bufs)
	if err != nil {
		return nil, err
	}
	e := &Evaluator{b: b}
	e.ev.src, e.ev.dst = bufs[0], bufs[1]
	t := autograd.NewTape(b)
	defer t.Release()
	hv, err := t.Upload(h, rows, d)
	if err != nil {
		return nil, err
	}
	return e.score(t, dec, hv)
}
