package multi

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/fullgraph"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// RunFullGraph trains cfg (full mode, one step per epoch: BatchSize 0)
// with the full-graph trainer and fcfg's settings (partition,
// staleness, ...; its Common is replaced by cfg's) on opts.Backends, and
// returns the link report. es, when set, is the dataset's stored edge
// split.
func RunFullGraph(ctx context.Context, ds *dataset.Dataset, cfg link.Config, fcfg fullgraph.Config, opts fullgraph.Options, es *split.EdgeSplit) (*link.Report, *fullgraph.Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Mode != train.Full || cfg.BatchSize != 0 {
		return nil, nil, &train.ConfigError{Field: "batch_size", Msg: fmt.Sprintf("the full-graph trainer takes one step per epoch on every training link (mode full, batch size 0), not mode %q batch %d", cfg.Mode, cfg.BatchSize)}
	}
	if err := link.CheckDataset(ds); err != nil {
		return nil, nil, err
	}
	s, err := link.MakeSplit(ds, &cfg, es)
	if err != nil {
		return nil, nil, err
	}
	neg, err := link.NewNegatives(s, &cfg)
	if err != nil {
		return nil, nil, &link.RunError{Op: "negative sampler", Err: err}
	}
	task := &fgTask{cfg: &cfg, split: s, neg: neg, evals: map[int][2]link.Metrics{}, secs: map[int]float64{}}
	defer task.close()
	fcfg.Common = cfg.Common
	opts.Task = task
	frep, err := fullgraph.Run(ctx, messagePassing(ds, s), fcfg, opts)
	if err != nil {
		return nil, nil, err
	}
	var losses, secs []float64
	for _, e := range frep.Epochs {
		losses, secs = append(losses, e.Loss), append(secs, e.Seconds)
	}
	rep := report(ds, &cfg, s, losses, secs, task.evals, task.secs)
	rep.Engine, rep.Devices, rep.Device = "fullgraph", len(frep.Devices), frep.Device
	rep.RowNormalized = frep.RowNormalized
	rep.Summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, frep, nil
}

// fgTask is link prediction as fullgraph.Task: every epoch all training
// links with their negatives (link.EpochEdges, link.Negatives of step
// (epoch, 0), link.NewBatch: link.Run's full-mode step), each pair
// scored by the rank owning its source.
type fgTask struct {
	cfg   *link.Config
	split *link.Split
	neg   *link.Negatives

	oldToNew []int32
	offsets  []int64

	mu    sync.Mutex
	cache map[int]*fgEpoch

	// Rank 0's evaluation.
	eval  *link.Evaluator
	evals map[int][2]link.Metrics
	secs  map[int]float64
}

// fgEpoch is one epoch's pairs (engine IDs), by the rank that scores
// them, and their number.
type fgEpoch struct {
	ranks []fgPairs
	total int
}

type fgPairs struct{ src, dst, labels []int32 }

func (t *fgTask) OutDim() int { return t.cfg.Hidden }

func (t *fgTask) Start(oldToNew []int32, offsets []int64) error {
	if oldToNew != nil && int64(len(oldToNew)) != t.split.NumNodes {
		return fmt.Errorf("renumbering of %d nodes for a split of %d", len(oldToNew), t.split.NumNodes)
	}
	if len(offsets) < 2 || offsets[len(offsets)-1] != t.split.NumNodes {
		return fmt.Errorf("blocks %v for %d nodes", offsets, t.split.NumNodes)
	}
	t.oldToNew, t.offsets = oldToNew, offsets
	t.cache = map[int]*fgEpoch{}
	return nil
}

func (t *fgTask) id(v int32) int32 {
	if t.oldToNew == nil {
		return v
	}
	return t.oldToNew[v]
}

// owner is the rank of engine ID v.
func (t *fgTask) owner(v int32) int {
	r, _ := slices.BinarySearch(t.offsets, int64(v)+1) // the first offset > v
	return r - 1
}

// epoch makes (once for all ranks) epoch e's pairs.
func (t *fgTask) epoch(e int) (*fgEpoch, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ep, ok := t.cache[e]; ok {
		return ep, nil
	}
	pos := link.EpochEdges(t.split, t.cfg.Seed, e)
	neg, err := t.neg.Draw(pos, e, 0)
	if err != nil {
		return nil, fmt.Errorf("negative sampling: %w", err)
	}
	b := link.NewBatch(pos, neg)
	ep := &fgEpoch{ranks: make([]fgPairs, len(t.offsets)-1), total: len(b.Src)}
	for i := range b.Src {
		u, v := t.id(b.Src[i]), t.id(b.Dst[i])
		p := &ep.ranks[t.owner(u)]
		p.src, p.dst, p.labels = append(p.src, u), append(p.dst, v), append(p.labels, b.Labels[i])
	}
	for old := range t.cache {
		if old < e-1 {
			delete(t.cache, old)
		}
	}
	t.cache[e] = ep
	return ep, nil
}

func (t *fgTask) Replica(rank int, b backend.Backend) (fullgraph.TaskReplica, error) {
	dec, err := t.cfg.NewDecoder(b, t.cfg.Hidden)
	if err != nil {
		return nil, err
	}
	return &fgReplica{t: t, rank: rank, b: b, dec: dec}, nil
}

type fgReplica struct {
	t    *fgTask
	rank int
	b    backend.Backend
	dec  link.Decoder
}

func (r *fgReplica) Params() []*nn.Param { return r.dec.Params() }
func (r *fgReplica) Free()               { nn.FreeParams(r.b, r.dec.Params()) }

// Loss scores this rank's pairs from h: the mean binary cross-entropy of
// its pairs weighted by their share of all pairs (so the ranks' shares
// sum to link.Run's loss of the step), its gradient with respect to h and
// the decoder's weights scaled alike.
func (r *fgReplica) Loss(epoch int, h []float32, rows, d int) (float64, []float32, error) {
	ep, err := r.t.epoch(epoch)
	if err != nil {
		return 0, nil, err
	}
	b := r.b
	for _, p := range r.dec.Params() {
		if err := b.Fill(p.Grad, 0); err != nil {
			return 0, nil, err
		}
	}
	dh := make([]float32, rows*d)
	mine := &ep.ranks[r.rank]
	if len(mine.src) == 0 {
		return 0, dh, nil
	}
	hb, err := b.Alloc(backend.Float32, rows*d)
	if err != nil {
		return 0, nil, err
	}
	defer b.Free(hb)
	gb, err := b.Alloc(backend.Float32, rows*d)
	if err != nil {
		return 0, nil, err
	}
	defer b.Free(gb)
	if err := b.Upload(hb, h); err != nil {
		return 0, nil, err
	}
	if err := b.Fill(gb, 0); err != nil {
		return 0, nil, err
	}
	t := autograd.NewTape(b)
	defer t.Release()
	hv, err := t.Leaf(hb, gb, rows, d)
	if err != nil {
		return 0, nil, err
	}
	lv, loss, done, err := link.PairLoss(t, r.dec, hv, mine.src, mine.dst, mine.labels)
	defer done()
	if err != nil {
		return 0, nil, err
	}
	if err := t.Backward(lv); err != nil {
		return 0, nil, err
	}
	if err := b.Download(dh, gb); err != nil {
		return 0, nil, err
	}
	if len(mine.src) == ep.total {
		return loss, dh, nil
	}
	scale := float32(len(mine.src)) / float32(ep.total)
	for i := range dh {
		dh[i] *= scale
	}
	for _, p := range r.dec.Params() {
		if err := b.Axpby(p.Grad, scale, p.Grad, 0, p.Grad); err != nil {
			return 0, nil, err
		}
	}
	return loss * float64(len(mine.src)) / float64(ep.total), dh, nil
}

// Evaluate scores the validation and test pairs from every node's
// embedding with link.Evaluator (rank 0).
func (r *fgReplica) Evaluate(epoch int, h []float32, rows, d int) (string, error) {
	t := r.t
	t0 := time.Now()
	if t.eval == nil {
		var err error
		if t.eval, err = link.NewPairsEvaluator(r.b, renumber(t.split, t.id, nil), t.cfg); err != nil {
			return "", err
		}
	}
	val, test, err := t.eval.RunEmbeddings(h, rows, d, r.dec)
	if err != nil {
		return "", err
	}
	t.evals[epoch] = [2]link.Metrics{val, test}
	t.secs[epoch] = time.Since(t0).Seconds()
	return summary(val, test, t.cfg.HitsK), nil
}

func (t *fgTask) close() {
	t.eval.Close()
	t.eval = nil
}
