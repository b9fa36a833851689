package runner

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/strata-gnn/strata/autograd"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Report is a multi-device run's result: the single-device trainer's
// report (accuracies, per-epoch losses, config) plus the DSP settings and
// the pipeline metrics.
type Report struct {
	train.Report
	DSP     Info    `json:"dsp"`
	Metrics Metrics `json:"metrics"`
}

// Info describes the multi-device setup.
type Info struct {
	Devices   int    `json:"devices"`
	Comm      string `json:"comm"`
	Scheme    string `json:"scheme"`
	Partition string `json:"partition"`
	// EdgeCut is the partitioner's count of undirected edges between
	// patches (-1 when not partitioned); CrossEdges counts in-adjacency
	// entries whose source another device owns.
	EdgeCut     int64   `json:"edge_cut"`
	CrossEdges  int64   `json:"cross_edges"`
	Book        []int64 `json:"book"`
	CachePolicy string  `json:"cache_policy"` // as configured (auto included)
	CacheGroup  int     `json:"cache_group"`
	// CacheLayout is the plan's policy ("partition", or "replicate/G"
	// for groups of G devices): what auto chose.
	CacheLayout      string       `json:"cache_layout,omitempty"`
	Hotness          string       `json:"hotness"`
	QueueCapacity    int          `json:"queue_capacity"`
	Rebalance        string       `json:"rebalance"`
	BatchesPerDevice int          `json:"batches_per_device"`
	DroppedSeeds     int          `json:"dropped_seeds"`
	Coordinated      bool         `json:"coordinated"`
	BucketBytes      int          `json:"bucket_bytes"`
	GradientBuckets  int          `json:"gradient_buckets"`
	RowNormalized    bool         `json:"row_normalized"`
	SparseFeatures   bool         `json:"sparse_features"`
	PerDevice        []DeviceInfo `json:"per_device"`
}

// DeviceInfo describes one device's share.
type DeviceInfo struct {
	Rank                int    `json:"rank"`
	Backend             string `json:"backend"`
	Nodes               int    `json:"nodes"`
	Edges               int64  `json:"edges"`
	TopologyDeviceBytes int64  `json:"topology_device_bytes"`
	TopologyHostBytes   int64  `json:"topology_host_bytes"`
	CachedRows          int    `json:"cached_rows"`
	CacheBytes          int64  `json:"cache_bytes"`
	LocationTableBytes  int64  `json:"location_table_bytes"`
}

// Metrics are the pipeline's counters. Summary and Ranks are totals over
// the run (this process's work): all devices' and every device's. Epochs
// holds each epoch's figures, those of the epoch's log line.
type Metrics struct {
	Summary metrics.Summary        `json:"summary"`
	Ranks   []metrics.RankSnapshot `json:"ranks"`
	Epochs  []EpochMetrics         `json:"epochs,omitempty"`
}

// EpochMetrics are one epoch's pipeline figures: every device's counters
// from the end of the previous epoch (or the start of the run) to the end
// of this one, as device 0's trainer finishes it, summarized as
// Metrics.Summary is. The stages of a pipeline overlap epochs: a sampler
// may already be working on the next one.
type EpochMetrics struct {
	Epoch int `json:"epoch"`
	metrics.Summary
}

// Since summarizes the work between prev, an earlier snapshot of the same
// devices (zero: the start), and m.
func (m Metrics) Since(prev Metrics) metrics.Summary {
	ranks := make([]metrics.RankSnapshot, len(m.Ranks))
	for i, r := range m.Ranks {
		var p metrics.RankSnapshot
		if i < len(prev.Ranks) {
			p = prev.Ranks[i]
		}
		ranks[i] = r.Since(p)
	}
	return metrics.Summarize(ranks)
}

// EpochLog keeps the per-epoch figures of a run (device 0's trainer adds
// one at the end of every epoch; not for concurrent use).
type EpochLog struct {
	last   Metrics
	epochs []EpochMetrics
}

// Add records epoch's figures given the snapshot now and returns them.
func (l *EpochLog) Add(epoch int, now Metrics) EpochMetrics {
	e := EpochMetrics{Epoch: epoch, Summary: now.Since(l.last)}
	l.last = now
	l.epochs = append(l.epochs, e)
	return e
}

// Epochs returns the figures recorded so far.
func (l *EpochLog) Epochs() []EpochMetrics { return l.epochs }

// WriteJSON writes the report to path (indented JSON), atomically.
func (r *Report) WriteJSON(path string) error {
	if err := atomicfile.WriteJSON(path, r); err != nil {
		return fmt.Errorf("dsp: writing %s: %w", path, err)
	}
	return nil
}

// snapshot collects every device's metrics.
func (s *shared) snapshot() Metrics { return CollectMetrics(s.ctrs, s.queues, &s.mu) }

// CollectMetrics snapshots every device's counters and queues (read under
// mu, which guards queues) and sums them, as Run reports them.
func CollectMetrics(ctrs []metrics.Counters, queues [][]func() metrics.QueueSnapshot, mu *sync.Mutex) Metrics {
	var m Metrics
	for r := range ctrs {
		rs := ctrs[r].Snapshot(r)
		mu.Lock()
		for _, q := range queues[r] {
			rs.Queues = append(rs.Queues, q())
		}
		mu.Unlock()
		m.Ranks = append(m.Ranks, rs)
	}
	m.Summary = metrics.Summarize(m.Ranks)
	return m
}

// report assembles the run's report.
func (s *shared) report(orig *dataset.Dataset, device string) *Report {
	info := s.info
	info.CrossEdges = crossEdges(s)
	m := s.snapshot()
	m.Epochs = s.epochs.Epochs()
	rep := NewReport(orig, s.pd.ds, &s.cfg, device, info, s.history, m)
	if s.resumed != nil {
		rep.ResumedFrom = &train.Cursor{Epoch: s.firstEpoch()}
	}
	return rep
}

// NewReport assembles Run's report: orig is the dataset as loaded, ds the
// partitioned one trained on, history the evaluated epochs; the headline
// fields come from the best epoch by validation accuracy, or the last.
func NewReport(orig, ds *dataset.Dataset, cfg *Config, device string, info Info, history []train.EpochRecord, m Metrics) *Report {
	rep := &Report{DSP: info, Metrics: m}
	rep.Report = train.Report{
		Schema: train.ReportVersion, StrataVersion: train.Version, Dataset: ds.Name, Model: cfg.Train.Model, Mode: cfg.Train.Mode,
		Device: fmt.Sprintf("%s x%d", device, cfg.Devices), Seed: cfg.Train.Seed, RowNormalized: info.RowNormalized,
		Config: cfg.Train, Epochs: history,
		Graph: train.GraphStats{Nodes: orig.NumNodes(), Edges: orig.Graph.NumEdges(), Features: ds.FeatDim, Classes: ds.NumClasses,
			Train: len(ds.Train), Val: len(ds.Val), Test: len(ds.Test)},
	}
	summarize(&rep.Report)
	return rep
}

func crossEdges(s *shared) int64 { return CrossEdges(s.in, s.pd.book) }

// summarize fills the headline fields as the single-device trainer does:
// the selected epoch is the best by validation accuracy (ties: lower
// validation loss, then earlier), or the last.
func summarize(r *train.Report) {
	if len(r.Epochs) == 0 {
		return
	}
	best := &r.Epochs[0]
	for i := range r.Epochs[1:] {
		e := &r.Epochs[i+1]
		if e.ValAccuracy > best.ValAccuracy || (e.ValAccuracy == best.ValAccuracy && e.ValLoss < best.ValLoss) {
			best = e
		}
	}
	last := &r.Epochs[len(r.Epochs)-1]
	r.BestValEpoch, r.BestValAcc, r.TestAtBestVal = best.Epoch, best.ValAccuracy, best.TestAccuracy
	r.LastValAcc, r.LastTestAcc = last.ValAccuracy, last.TestAccuracy
	sel := best
	r.Selection = train.SelectBest
	if r.Config.Select == train.SelectLast {
		sel, r.Selection = last, train.SelectLast
	}
	r.SelectedEpoch, r.ValAccuracy, r.TestAccuracy = sel.Epoch, sel.ValAccuracy, sel.TestAccuracy
}

// endEpoch (device 0) evaluates, records the epoch and logs it.
func (d *device) endEpoch(epoch int) error {
	s := d.s
	if d.eval == nil {
		ev, err := newEvaluator(d.b, s)
		if err != nil {
			return err
		}
		d.eval = ev
	}
	rec, err := d.eval.run(d.model)
	if err != nil {
		return err
	}
	rec.Epoch = epoch + 1
	rec.BatchLosses = d.losses
	rec.Loss = train.MeanLoss(d.losses)
	rec.Seconds = time.Since(d.epochT).Seconds()
	d.losses, d.epochT = nil, time.Time{}
	s.mu.Lock()
	s.history = append(s.history, rec)
	s.mu.Unlock()
	em := s.epochs.Add(epoch+1, s.snapshot())
	epochs := s.cfg.Train.Epochs
	if log := s.opts.Log; log != nil && (epoch == 0 || (epoch+1)%train.LogEvery(epochs) == 0 || epoch == epochs-1) {
		fmt.Fprintf(log, "epoch %*d/%d  loss %.4f  train %.4f  val %.4f  test %.4f  (%.2fs)  %s\n",
			len(fmt.Sprint(epochs)), epoch+1, epochs, rec.Loss, rec.TrainAccuracy, rec.ValAccuracy, rec.TestAccuracy, rec.Seconds,
			em.Summary)
	}
	return nil
}

// evaluator runs inference on one device (device 0) as the single-device
// trainer does: over the whole graph with all neighbors ("full"), or on
// sampled mini-batches of the train, validation and test nodes with
// EvalFanouts ("sampled", for graphs too large for one pass; the batches
// are drawn on the host from the whole graph).
type evaluator struct {
	b      backend.Backend
	s      *shared
	full   *nn.Block
	xs     *autograd.SparseInput
	xd     backend.Buffer
	layers int

	sampler *sample.NeighborSampler // sampled evaluation
	nodes   []int32                 // sorted union of the splits
}

func newEvaluator(b backend.Backend, s *shared) (*evaluator, error) {
	ev := &evaluator{b: b, s: s, layers: s.cfg.Train.Layers}
	var err error
	if s.cfg.Train.Eval == train.Sampled {
		if ev.sampler, err = sample.NewNeighborSampler(s.in, sample.Config{Fanouts: s.cfg.Train.EvalFanouts}); err != nil {
			return nil, err
		}
		ds := s.pd.ds
		seen := make([]bool, ds.NumNodes())
		for _, split := range [][]int32{ds.Train, ds.Val, ds.Test} {
			for _, v := range split {
				if !seen[v] {
					seen[v] = true
					ev.nodes = append(ev.nodes, v)
				}
			}
		}
		slices.Sort(ev.nodes)
		return ev, nil
	}
	if ev.full, err = nn.UploadGraph(b, s.in); err != nil {
		return nil, err
	}
	n := int(s.in.NumRows)
	if s.sparse {
		h, err := autograd.HostSparseFromDense(n, s.dim, s.x)
		if err == nil {
			ev.xs, err = autograd.NewSparseInput(b, h.Rows, h.Cols, h.Indptr, h.Indices, h.Values)
		}
		if err != nil {
			ev.free()
			return nil, err
		}
		return ev, nil
	}
	if ev.xd, err = upload(b, s.x); err != nil {
		ev.free()
		return nil, err
	}
	return ev, nil
}

func (ev *evaluator) free() {
	if ev == nil {
		return
	}
	if ev.full != nil {
		ev.full.Free()
	}
	ev.xs.Free(ev.b)
	if ev.xd != nil {
		ev.b.Free(ev.xd)
	}
	ev.full, ev.xs, ev.xd = nil, nil, nil
}

// run evaluates model on the train, validation and test nodes.
func (ev *evaluator) run(model nn.Model) (train.EpochRecord, error) {
	if ev.sampler != nil {
		return ev.runSampled(model)
	}
	rec, _, _, err := ev.runFull(model)
	return rec, err
}

// runFull is the whole-graph evaluation; it also returns the wall time
// of the forward pass with the logits' download (which waits for it) and
// of the scoring on the host.
func (ev *evaluator) runFull(model nn.Model) (_ train.EpochRecord, forward, score time.Duration, _ error) {
	t0 := time.Now()
	t := autograd.NewTape(ev.b)
	defer t.Release()
	blocks := make([]*nn.Block, ev.layers)
	for i := range blocks {
		blocks[i] = ev.full
	}
	var out *autograd.Var
	var err error
	if ev.xs != nil {
		out, err = model.ForwardSparse(t, ev.xs, blocks, false, 0)
	} else {
		var x *autograd.Var
		if x, err = t.Const(ev.xd, int(ev.s.in.NumRows), ev.s.dim); err == nil {
			out, err = model.Forward(t, x, blocks, false, 0)
		}
	}
	if err != nil {
		return train.EpochRecord{}, 0, 0, err
	}
	ds := ev.s.pd.ds
	c := ds.NumClasses
	if out.Rows != int(ds.NumNodes()) || out.Cols != c {
		return train.EpochRecord{}, 0, 0, fmt.Errorf("model produced %dx%d logits, want %dx%d", out.Rows, out.Cols, ds.NumNodes(), c)
	}
	// The classes come from the device (n int32s instead of n*c logits
	// over the bus); only the validation rows' logits come back, for
	// the loss.
	pred, valRows, err := nn.Classify(ev.b, out.Value, int(ds.NumNodes()), c, ds.Val)
	if err != nil {
		return train.EpochRecord{}, 0, 0, err
	}
	t1 := time.Now()
	rec := ev.count(func(v int32) (int, bool) { return int(pred[v]), true },
		func(i int, _ int32) []float32 { return valRows[i*c : (i+1)*c] }).record()
	return rec, t1.Sub(t0), time.Since(t1), nil
}

// runSampled evaluates batches of EvalBatchSize nodes; the sampling key
// does not depend on the epoch, so every epoch sees the same
// neighborhoods.
func (ev *evaluator) runSampled(model nn.Model) (train.EpochRecord, error) {
	out, err := ev.logitsSampled(model, 0, 1)
	if err != nil {
		return train.EpochRecord{}, err
	}
	return ev.scoreLogits(func(v int32) []float32 { return out[v] }).record(), nil
}

// logitsSampled returns the logits of the nodes of every k-th evaluation
// batch from batch rank on (sharded evaluation; rank 0 of 1: all).
func (ev *evaluator) logitsSampled(model nn.Model, rank, k int) (map[int32][]float32, error) {
	cfg := &ev.s.cfg.Train
	c := ev.s.pd.ds.NumClasses
	out := make(map[int32][]float32, len(ev.nodes)/k+1)
	key := rng.Derive(cfg.Seed, tagEval)
	bs := cfg.EvalBatchSize
	for b := rank; b*bs < len(ev.nodes); b += k {
		seeds := ev.nodes[b*bs : min((b+1)*bs, len(ev.nodes))]
		mb, err := ev.sampler.Sample(seeds, sample.Key{Seed: key, Batch: b})
		if err != nil {
			return nil, err
		}
		inputs := mb.InputNodes()
		dim := ev.s.dim
		feats := make([]float32, len(inputs)*dim)
		for i, v := range inputs {
			copy(feats[i*dim:(i+1)*dim], ev.s.x[int(v)*dim:(int(v)+1)*dim])
		}
		t := autograd.NewTape(ev.b)
		logits, cleanup, err := forward(ev.b, t, model, mb, feats, ev.s.sparse, dim, false, 0)
		if err == nil && (logits.Rows != len(seeds) || logits.Cols != c) {
			err = fmt.Errorf("model produced %dx%d logits for %d seeds", logits.Rows, logits.Cols, len(seeds))
		}
		var host []float32
		if err == nil {
			host = make([]float32, logits.Len())
			err = ev.b.Download(host, logits.Value)
		}
		t.Release()
		cleanup()
		if err != nil {
			return nil, err
		}
		for i, v := range seeds {
			out[v] = host[i*c : (i+1)*c]
		}
	}
	return out, nil
}

// tally holds the evaluation's sums: correct and counted nodes of the
// train, validation and test splits, and the validation loss summed over
// the counted validation nodes. Shards add up.
type tally [7]float64

const (
	tCorrect = 0 // +split
	tCount   = 3 // +split
	tValLoss = 6
)

// count adds the nodes of the splits that pred classifies (false: not
// evaluated here); valLogits gives validation node v's logits (i: its
// position in ds.Val) for the loss.
func (ev *evaluator) count(pred func(v int32) (int, bool), valLogits func(i int, v int32) []float32) tally {
	ds := ev.s.pd.ds
	var t tally
	for split, nodes := range [][]int32{ds.Train, ds.Val, ds.Test} {
		for i, v := range nodes {
			best, ok := pred(v)
			if !ok {
				continue
			}
			label := ds.Labels[v]
			if split == 1 {
				t[tValLoss] += nn.CrossEntropy(valLogits(i, v), label)
			}
			if int32(best) == label {
				t[tCorrect+split]++
			}
			t[tCount+split]++
		}
	}
	return t
}

// scoreLogits counts the nodes whose logits logitsOf has (nil: not
// evaluated here).
func (ev *evaluator) scoreLogits(logitsOf func(int32) []float32) tally {
	return ev.count(func(v int32) (int, bool) {
		row := logitsOf(v)
		if row == nil {
			return 0, false
		}
		return nn.Argmax(row), true
	}, func(_ int, v int32) []float32 { return logitsOf(v) })
}

// record turns the sums into accuracies and the mean validation loss.
func (t tally) record() train.EpochRecord {
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	return train.EpochRecord{TrainAccuracy: ratio(t[tCorrect], t[tCount]), ValAccuracy: ratio(t[tCorrect+1], t[tCount+1]),
		ValLoss: ratio(t[tValLoss], t[tCount+1]), TestAccuracy: ratio(t[tCorrect+2], t[tCount+2])}
}

// CacheLayout describes a plan's layout for Info.CacheLayout.
func CacheLayout(p *cache.Plan) string {
	if p.Policy() == cache.Replicate {
		return fmt.Sprintf("%s/%d", p.Policy(), p.GroupSize())
	}
	return string(p.Policy())
}
