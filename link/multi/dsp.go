package multi

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// RunDSP trains cfg (sampled mode) in the DSP engine with dcfg's
// multi-device settings (its Train is replaced by cfg's) on
// opts.Backends, and returns the link report. es, when set, is the
// dataset's stored edge split (link.Options.EdgeSplit). opts.Keep, when
// set, keeps device 0's encoder and decoder parameters of the epoch the
// report selects (as link.Options.Keep does); the engine itself keeps
// nothing for a task.
func RunDSP(ctx context.Context, ds *dataset.Dataset, cfg link.Config, dcfg engine.Config, opts engine.Options, es *split.EdgeSplit) (*link.Report, *engine.Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Mode != train.Sampled {
		return nil, nil, &train.ConfigError{Field: "mode", Msg: fmt.Sprintf("link prediction on several devices (DSP) is sampled, not %q", cfg.Mode)}
	}
	if err := link.CheckDataset(ds); err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	s, err := link.MakeSplit(ds, &cfg, es)
	if err != nil {
		return nil, nil, err
	}
	if opts.Log != nil {
		fmt.Fprintf(opts.Log, "link split (%s): %d train, %d validation, %d test links in %.1fs\n", s.Source, s.Train.Len(), s.Val.Len(), s.Test.Len(), time.Since(t0).Seconds())
	}
	task, err := newDSPTask(s, &cfg, dcfg.Devices)
	if err != nil {
		return nil, nil, err
	}
	defer task.close()
	task.keep, opts.Keep = opts.Keep, nil
	// BatchSize is the positives of one optimizer step, as on one
	// device: each device takes its share of them, so a step averages
	// the gradients of K shares and an epoch takes the steps of one
	// device's run.
	dcfg.Train = train.Config{Common: cfg.Common, Mode: train.Sampled, BatchSize: task.per, Fanouts: cfg.Fanouts}
	opts.Task = task
	erep, err := engine.Run(ctx, messagePassing(ds, s), dcfg, opts)
	if err != nil {
		return nil, nil, err
	}
	rep := report(ds, &cfg, s, erep.Run.EpochLosses, erep.Run.EpochTrainSeconds, task.evals, task.secs)
	rep.Engine, rep.Devices, rep.Device = "dsp", dcfg.Devices, erep.Device
	rep.RowNormalized = erep.DSP.RowNormalized
	rep.Summarize()
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, erep, nil
}

// messagePassing is ds with the split's message-passing graph (no
// held-out link) and every node a "training node" (the partitioner
// balances them with the edges; link prediction has no node labels).
func messagePassing(ds *dataset.Dataset, s *link.Split) *dataset.Dataset {
	mp := *ds
	mp.Graph = s.Out
	n := int(ds.NumNodes())
	mp.Train = make([]int32, n)
	for i := range mp.Train {
		mp.Train[i] = int32(i)
	}
	mp.Val, mp.Test = nil, nil
	return &mp
}

// dspTask is link prediction as engine.Task; it prepares its batches
// in the sampler stage (engine.TaskPreparer).
type dspTask struct {
	cfg   *link.Config
	split *link.Split // the caller's node IDs
	k     int
	per   int // positives per device and step: ceil(BatchSize/K)
	neg   *link.Negatives

	oldToNew []int32 // nil: unchanged
	book     *book.Book

	mu     sync.Mutex
	epochs map[int][][]engine.TaskBatch // dealt epochs, shared by the devices

	// Device 0's evaluation (Evaluate runs on its trainer only).
	x     *train.Inputs
	xb    backend.Backend
	eval  *link.Evaluator
	evals map[int][2]link.Metrics
	secs  map[int]float64
	keep  *train.Keeper
}

// dealt is a TaskBatch's Work as Batches deals it: the positives
// (caller's IDs) and the key of their negatives. Prepare makes the rest.
type dealt struct {
	pos          link.Edges
	epoch, batch int // batch: the global batch i*K+r
}

// pairs is a prepared TaskBatch's Work.
type pairs struct {
	b   *link.Batch // caller's IDs; SrcRow and DstRow index the seeds
	pos link.Edges  // the positives in engine IDs (ExcludeTargets)
	// keys are pos as link.TargetKeys (engine.TaskTargets: a GPU batch
	// loses these edges on its GPU).
	keys []uint64
}

var (
	_ engine.TaskPreparer = (*dspTask)(nil)
	_ engine.TaskTargets  = (*dspTask)(nil)
	_ engine.TaskWarmer   = (*dspTask)(nil)
)

func newDSPTask(s *link.Split, cfg *link.Config, k int) (*dspTask, error) {
	neg, err := link.NewNegatives(s, cfg)
	if err != nil {
		return nil, &link.RunError{Op: "negative sampler", Err: err}
	}
	if k < 1 {
		return nil, &train.ConfigError{Field: "devices", Msg: fmt.Sprintf("%d devices", k)}
	}
	return &dspTask{cfg: cfg, split: s, k: k, per: (cfg.BatchSize + k - 1) / k, neg: neg, epochs: map[int][][]engine.TaskBatch{},
		evals: map[int][2]link.Metrics{}, secs: map[int]float64{}}, nil
}

func (t *dspTask) OutDim() int { return t.cfg.Hidden }

func (t *dspTask) Start(oldToNew []int32, b *book.Book) error {
	if oldToNew != nil && int64(len(oldToNew)) != t.split.NumNodes {
		return fmt.Errorf("renumbering of %d nodes for a split of %d", len(oldToNew), t.split.NumNodes)
	}
	if b.K() != t.k {
		return fmt.Errorf("a book of %d devices for %d", b.K(), t.k)
	}
	t.oldToNew, t.book = oldToNew, b
	return nil
}

func (t *dspTask) id(v int32) int32 {
	if t.oldToNew == nil {
		return v
	}
	return t.oldToNew[v]
}

func (t *dspTask) MaxBatches() int {
	share := (t.split.Train.Len() + t.k - 1) / t.k
	return max((share+t.per-1)/t.per, 1)
}

// Batches deals epoch e's training links to the owners of their
// sources (engine.Deal) and cuts them into batches of positives. The
// epoch is dealt once and shared by the devices; the rest of a batch
// (its negatives, keyed by the global batch i*K+r, and its seeds) is
// made by Prepare, in the sampler stage of the device that samples it.
func (t *dspTask) Batches(e int) ([][]engine.TaskBatch, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if got, ok := t.epochs[e]; ok {
		return got, nil
	}
	edges := link.EpochEdges(t.split, t.cfg.Seed, e)
	order := make([]int32, edges.Len())
	for i := range order {
		order[i] = int32(i)
	}
	owner := func(i int32) int { return t.book.Owner(int64(t.id(edges.Src[i]))) }
	dealtIdx, _, err := engine.Deal(order, owner, t.k, t.per, engine.Pad)
	if err != nil {
		return nil, err
	}
	out := make([][]engine.TaskBatch, t.k)
	for r, batches := range dealtIdx {
		out[r] = make([]engine.TaskBatch, len(batches))
		for i, idx := range batches {
			pos := link.Edges{Src: make([]int32, len(idx)), Dst: make([]int32, len(idx))}
			for j, x := range idx {
				pos.Src[j], pos.Dst[j] = edges.Src[x], edges.Dst[x]
			}
			out[r][i] = engine.TaskBatch{Work: &dealt{pos: pos, epoch: e, batch: i*t.k + r}}
		}
	}
	// Devices run at most a few batches apart: keep the epochs that
	// may still be asked for (a miss deals the epoch again, the same).
	for old := range t.epochs {
		if old < e-2 {
			delete(t.epochs, old)
		}
	}
	t.epochs[e] = out
	return out, nil
}

// Prepare makes a dealt batch's negatives (link.Negatives), the
// batch (link.NewBatch: pairs, labels, seeds and their rows) and its
// seeds and positives in engine IDs. It runs in the engine's sampler
// stage, batch by batch (engine.TaskPreparer).
func (t *dspTask) Prepare(bt engine.TaskBatch) (engine.TaskBatch, error) {
	d, ok := bt.Work.(*dealt)
	if !ok {
		return bt, fmt.Errorf("link: preparing a batch of %T", bt.Work)
	}
	neg, err := t.neg.Draw(d.pos, d.epoch, d.batch)
	if err != nil {
		return bt, fmt.Errorf("negative sampling, epoch %d global batch %d: %w", d.epoch+1, d.batch, err)
	}
	b := link.NewBatch(d.pos, neg)
	w := &pairs{b: b, pos: link.Edges{Src: make([]int32, d.pos.Len()), Dst: make([]int32, d.pos.Len())}}
	for j := range d.pos.Src {
		w.pos.Src[j], w.pos.Dst[j] = t.id(d.pos.Src[j]), t.id(d.pos.Dst[j])
	}
	w.keys = link.TargetKeys(w.pos)
	seeds := make([]int32, len(b.Seeds))
	for j, v := range b.Seeds {
		seeds[j] = t.id(v)
	}
	return engine.TaskBatch{Seeds: seeds, Work: w}, nil
}

// WarmBatch is the engine's warm-up batch over seeds 0..n-1
// (engine.TaskWarmer): positives (0,1), (2,3), ... and negatives (1,2),
// (3,4), ..., so that every seed is an endpoint and the seeds, ascending,
// are the rows 0..n-1. Only Loss reads it.
func (t *dspTask) WarmBatch(n int) engine.TaskBatch {
	var pos, neg link.Edges
	for i := 0; i+1 < n; i += 2 {
		pos.Src, pos.Dst = append(pos.Src, int32(i)), append(pos.Dst, int32(i+1))
		neg.Src, neg.Dst = append(neg.Src, int32(i+1)), append(neg.Dst, int32((i+2)%n))
	}
	if n%2 == 1 {
		neg.Src, neg.Dst = append(neg.Src, int32(n-1)), append(neg.Dst, 0)
	}
	b := link.NewBatch(pos, neg)
	return engine.TaskBatch{Seeds: b.Seeds, Work: &pairs{b: b}}
}

// Targets are the batch's positives as link.TargetKeys, which a GPU
// batch loses on its GPU: the edges ExcludeTargets removes on the host.
func (t *dspTask) Targets(bt engine.TaskBatch) []uint64 {
	if w, ok := bt.Work.(*pairs); ok {
		return w.keys
	}
	return nil
}

func (t *dspTask) Exclude(mb *sample.MiniBatch, bt engine.TaskBatch) error {
	w, ok := bt.Work.(*pairs)
	if !ok {
		return fmt.Errorf("link: a batch of %T", bt.Work)
	}
	link.ExcludeTargets(mb, w.pos)
	return nil
}

// replica is a device's decoder.
type replica struct {
	b   backend.Backend
	dec link.Decoder
}

func (t *dspTask) Replica(b backend.Backend) (engine.TaskReplica, error) {
	dec, err := t.cfg.NewDecoder(b, t.cfg.Hidden)
	if err != nil {
		return nil, err
	}
	return &replica{b: b, dec: dec}, nil
}

func (r *replica) Params() []*nn.Param { return r.dec.Params() }
func (r *replica) Free()               { nn.FreeParams(r.b, r.dec.Params()) }

func (r *replica) Loss(t *autograd.Tape, h *autograd.Var, bt engine.TaskBatch) (*autograd.Var, func(), error) {
	w, ok := bt.Work.(*pairs)
	if !ok {
		return nil, nil, fmt.Errorf("link: a batch of %T", bt.Work)
	}
	lv, _, done, err := link.PairLoss(t, r.dec, h, w.b.SrcRow, w.b.DstRow, w.b.Labels)
	return lv, done, err
}

// Evaluate scores the split's validation and test pairs with device
// 0's model and decoder over the engine's message-passing graph (engine
// IDs), with link.Evaluator.
func (t *dspTask) Evaluate(ev engine.TaskEval, epoch int) (string, error) {
	r, ok := ev.Replica.(*replica)
	if !ok {
		return "", fmt.Errorf("link: a replica of %T", ev.Replica)
	}
	t0 := time.Now()
	if t.eval == nil {
		t.x, t.xb = train.NewInputs(ev.B, ev.Feats), ev.B
		var err error
		if t.eval, err = link.NewEvaluator(ev.B, renumber(t.split, t.id, ev.In), t.x, nil, t.cfg); err != nil {
			return "", err
		}
	}
	val, test, err := t.eval.Run(ev.Model, r.dec)
	if err != nil {
		return "", err
	}
	t.evals[epoch] = [2]link.Metrics{val, test}
	t.secs[epoch] = time.Since(t0).Seconds()
	// Every epoch the selection may pick is evaluated (the last one
	// always is), so Evaluate offers them all.
	rec := link.EpochRecord{Epoch: epoch + 1, Val: val, Test: test}
	sel := rec.Selection()
	params := append(append([]*nn.Param(nil), ev.Model.Params()...), r.dec.Params()...)
	if err := t.keep.Offer(&sel, epoch == t.cfg.Epochs-1, ev.B, params); err != nil {
		return "", err
	}
	return summary(val, test, t.cfg.HitsK), nil
}

// summary is an evaluated epoch's part of a log line.
func summary(val, test link.Metrics, k int) string {
	return fmt.Sprintf("val auc %.4f  test auc %.4f  mrr %.4f  hits@%d %.4f", val.AUC, test.AUC, test.MRR, k, test.Hits)
}

// renumber is s's evaluation pairs in a trainer's node IDs (id maps
// them) over its message-passing graph in (an in-adjacency; nil when
// the evaluation does not embed).
func renumber(s *link.Split, id func(int32) int32, in *graph.CSR) *link.Split {
	m := func(e link.Edges) link.Edges {
		out := link.Edges{Src: make([]int32, e.Len()), Dst: make([]int32, e.Len())}
		for i := range e.Src {
			out.Src[i], out.Dst[i] = id(e.Src[i]), id(e.Dst[i])
		}
		return out
	}
	return &link.Split{Source: s.Source, NumNodes: s.NumNodes, Undirected: s.Undirected, Val: m(s.Val), Test: m(s.Test),
		ValNeg: m(s.ValNeg), TestNeg: m(s.TestNeg), In: in, Out: in}
}

func (t *dspTask) close() {
	t.eval.Close()
	if t.x != nil {
		t.x.Free()
	}
	t.eval, t.x = nil, nil
}

// report is the link report of a run whose epochs had these losses and
// training times, evaluated at the epochs of evals (0-based).
func report(ds *dataset.Dataset, cfg *link.Config, s *link.Split, losses, secs []float64, evals map[int][2]link.Metrics, evalSecs map[int]float64) *link.Report {
	rep := &link.Report{Schema: link.ReportVersion, StrataVersion: train.Version, Task: "link", Dataset: ds.Name, Model: cfg.Model,
		Mode: cfg.Mode, Decoder: cfg.Decoder, Seed: cfg.Seed, HitsK: cfg.HitsK, Config: *cfg, Split: s.Stats(),
		Graph: link.Graph{Nodes: ds.NumNodes(), Edges: ds.Graph.NumEdges(), Features: ds.FeatDim}}
	for e, l := range losses {
		rec := link.EpochRecord{Epoch: e + 1, Loss: l}
		if e < len(secs) {
			rec.Seconds = secs[e]
		}
		if m, ok := evals[e]; ok {
			rec.Val, rec.Test, rec.EvalSeconds = m[0], m[1], evalSecs[e]
		} else {
			rec.EvalSkipped = true
		}
		rep.Epochs = append(rep.Epochs, rec)
	}
	return rep
}
