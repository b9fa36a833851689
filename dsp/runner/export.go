package runner

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/optim"
	"github.com/strata-gnn/strata/partition/book"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
	"golang.org/x/sync/errgroup"
)

// This file exports the pieces of the host runner that package dsp/gpurun
// (the same DSP training with sampling, feature exchange and gradient
// all-reduce on the devices) reuses, so that both make the same batches,
// initial weights, dropout masks, reports and evaluations.

// Normalize fills the defaults and validates the configuration, as Run
// does.
func (c *Config) Normalize() error { return c.normalize() }

// CheckDataset rejects datasets that cannot be trained on, as Run does.
func CheckDataset(ds *dataset.Dataset) error { return checkDataset(ds) }

// Partitioned is a dataset split into cfg.Devices patches: renumbered so
// that device p owns the node IDs of Book range p.
type Partitioned struct {
	Dataset *dataset.Dataset
	Book    *book.Book
	Method  string // "none", "range", "multilevel" or "metis"
	EdgeCut int64  // undirected edges between patches; -1 if not computed
}

// Partition splits ds as Run does (cfg must be normalized), saying on log
// (when not nil) that a partitioner runs and what it cut.
func Partition(ctx context.Context, ds *dataset.Dataset, cfg *Config, log io.Writer) (*Partitioned, error) {
	pd, err := partitionData(ctx, ds, cfg, log)
	if err != nil {
		return nil, err
	}
	return &Partitioned{Dataset: pd.ds, Book: pd.book, Method: pd.method, EdgeCut: pd.edgeCut}, nil
}

// AssignBatches deals one epoch's training nodes to the devices of b as
// Run does (mode Pad or Trim): batches[r][i] is device r's batch i, every
// device has the same number of batches, and dropped counts the training
// nodes left out (Trim). Device r's batch i is global batch i*K+r.
func AssignBatches(trainNodes []graph.NodeID, b *book.Book, batchSize int, mode string, seed uint64, epoch int) (batches [][][]graph.NodeID, dropped int, err error) {
	if b == nil || batchSize < 1 {
		return nil, 0, fmt.Errorf("dsp: assign: nil book or batch size %d", batchSize)
	}
	p, err := assign(trainNodes, b, batchSize, mode, seed, epoch)
	if err != nil {
		return nil, 0, err
	}
	return p.batches, p.dropped, nil
}

// DropoutSeed keys the dropout masks of global batch global of epoch, as
// the single-device trainer does.
func DropoutSeed(seed uint64, epoch, global int) uint64 {
	return rng.Derive(seed, tagDropout, uint64(epoch), uint64(global))
}

// ModelConfig is the model Run builds for cfg on features of inDim
// columns and classes classes (the single-device trainer's initial
// weights).
func ModelConfig(cfg train.Config, inDim, classes int) nn.Config {
	mc := nn.Config{
		Kind: cfg.Model, InDim: inDim, Hidden: cfg.Hidden, OutDim: classes, Layers: cfg.Layers,
		Heads: cfg.Heads, OutHeads: cfg.OutHeads,
		Dropout: float32(cfg.Dropout), InputDropout: float32(cfg.Dropout), AttnDropout: float32(cfg.AttnDrop),
		ExactDropout: true, // a zero rate is none, not nn's default
		Seed:         rng.Derive(cfg.Seed, tagInit),
	}
	if cfg.Model != train.GAT {
		mc.Heads, mc.OutHeads, mc.AttnDropout = 0, 0, 0
	}
	return mc
}

// NewOptimizer is the optimizer Run steps for cfg.
func NewOptimizer(b backend.Backend, params []*nn.Param, cfg train.Config) optim.Optimizer {
	if cfg.Optimizer == "adam" {
		return optim.NewAdam(b, params, float32(cfg.LR), 0.9, 0.999, 1e-8, float32(cfg.WeightDecay))
	}
	return optim.NewSGD(b, params, float32(cfg.LR), float32(cfg.Momentum), float32(cfg.WeightDecay))
}

// Features returns ds's feature table as Run trains on it: row-normalized
// when rowNorm is on, or auto and every value is >= 0 (normalized reports
// which), and whether it counts as sparse (under a quarter nonzero).
func Features(ds *dataset.Dataset, rowNorm string) (x []float32, normalized, sparse bool) {
	x = ds.Features
	normalized = rowNorm == train.RowNormOn || (rowNorm == train.RowNormAuto && nonNegative(x))
	if normalized {
		x = dataset.RowNormalize(x, ds.FeatDim)
	}
	nnz := 0
	for _, v := range x {
		if v != 0 {
			nnz++
		}
	}
	return x, normalized, float64(nnz) < sparseThreshold*float64(len(x))
}

// HotOrder ranks the nodes of the in-adjacency in for the feature cache
// (hottest first) by in-degree, PageRank or reverse PageRank. Pre-sampling
// needs a sampling pass (PresampleOrder).
func HotOrder(in *graph.CSR, h cache.Hotness) ([]graph.NodeID, error) {
	switch h {
	case cache.ByInDegree, "":
		return cache.InDegree(in)
	case cache.ByPageRank:
		return cache.PageRank(in)
	case cache.ByReversePageRank:
		return cache.ReversePageRank(in)
	}
	return nil, fmt.Errorf("dsp: hotness %q needs a pre-sampling pass (use in-degree, pagerank or reverse-pagerank)", h)
}

// PresamplePlan is the pre-sampling pass's batches: every device's
// epoch-0 batches dealt as AssignBatches does, with the pre-sampling key
// instead of the training seed (so the pass draws other neighborhoods
// than the first epoch). Run's distributed pass, PresampleOrder and the
// device run's pass on the GPUs all sample exactly these.
type PresamplePlan struct {
	// Batches[r][i] is device r's batch i.
	Batches [][][]graph.NodeID
	seed    uint64
}

// NewPresamplePlan deals pd's training nodes for the pre-sampling pass
// (cfg is normalized).
func NewPresamplePlan(pd *Partitioned, cfg *Config) (*PresamplePlan, error) {
	if pd == nil || pd.Book == nil || pd.Dataset == nil || cfg == nil {
		return nil, fmt.Errorf("dsp: presample: missing partition or configuration")
	}
	seed := rng.Derive(cfg.Train.Seed, tagPresample)
	p, err := assign(pd.Dataset.Train, pd.Book, cfg.Train.BatchSize, cfg.Rebalance, seed, 0)
	if err != nil {
		return nil, fmt.Errorf("dsp: presample: %w", err)
	}
	return &PresamplePlan{Batches: p.batches, seed: seed}, nil
}

// Key is the sampling key of device r's batch i (global batch i*K+r).
func (p *PresamplePlan) Key(r, i int) sample.Key {
	return sample.Key{Seed: p.seed, Batch: i*len(p.Batches) + r}
}

// presampleScratchBytes bounds the host pass's per-goroutine memory (a
// count array and the sampler's relabeling map, 4 bytes per node each):
// on graphs of hundreds of millions of nodes fewer goroutines run.
const presampleScratchBytes = 4 << 30

// PresampleOrder is the pre-sampling hotness computed on the host over the
// whole graph: nodes ranked by how often the batches of the
// PresamplePlan use them as input nodes (ties by ID). Collective sampling
// draws the same batches as a whole-graph sampler, so this is the order
// the runner's distributed pre-sampling pass gives; the device run on CPU
// back ends, whose samplers start only after the cache is laid out, uses
// it. in is pd's in-adjacency; cfg is normalized.
//
// The batches are sampled by up to GOMAXPROCS goroutines, each counting
// into its own array; the counts are integers, so the order does not
// depend on the number of goroutines.
func PresampleOrder(ctx context.Context, in *graph.CSR, pd *Partitioned, cfg *Config) ([]graph.NodeID, error) {
	return presampleOrder(ctx, in, pd, cfg, runtime.GOMAXPROCS(0))
}

func presampleOrder(ctx context.Context, in *graph.CSR, pd *Partitioned, cfg *Config, workers int) ([]graph.NodeID, error) {
	if in == nil || pd == nil || pd.Book == nil || pd.Dataset == nil || cfg == nil {
		return nil, fmt.Errorf("dsp: presample: missing graph, partition or configuration")
	}
	if in.NumRows != pd.Book.NumNodes() {
		return nil, fmt.Errorf("dsp: presample: graph of %d nodes, partition book of %d", in.NumRows, pd.Book.NumNodes())
	}
	plan, err := NewPresamplePlan(pd, cfg)
	if err != nil {
		return nil, err
	}
	type job struct{ r, i int }
	var jobs []job
	for r, batches := range plan.Batches {
		for i := range batches {
			jobs = append(jobs, job{r, i})
		}
	}
	procs := runtime.GOMAXPROCS(0)
	workers = min(workers, len(jobs), int(max(presampleScratchBytes/(8*max(in.NumRows, 1)), 1)))
	workers = max(workers, 1)
	// Goroutines left over (fewer batches than processors) sample inside
	// each batch (node-wise).
	smps, done, err := wholeGraphSamplers(in, cfg.Scheme, cfg.Train.Fanouts, cfg.Replace, cfg.Weighted, workers, max(procs/workers, 1))
	if err != nil {
		return nil, fmt.Errorf("dsp: presample: %w", err)
	}
	defer done()
	// A node is counted at most once per batch, and there are fewer
	// batches than nodes: int32 counts do not overflow.
	counts := make([][]int32, workers)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			c := make([]int32, in.NumRows)
			counts[w] = c
			for {
				j := int(next.Add(1) - 1)
				if j >= len(jobs) {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				r, i := jobs[j].r, jobs[j].i
				mb, err := smps[w].Sample(plan.Batches[r][i], plan.Key(r, i))
				if err != nil {
					return fmt.Errorf("dsp: presample: device %d batch %d: %w", r, i, err)
				}
				for _, v := range mb.InputNodes() {
					c[v]++
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	total := make([]int64, in.NumRows)
	for _, c := range counts {
		for v, x := range c {
			total[v] += int64(x)
		}
	}
	return cache.ByCounts(total), nil
}

// CrossEdges counts the in-adjacency entries of in whose source another
// device of b owns.
func CrossEdges(in *graph.CSR, b *book.Book) int64 {
	var n int64
	for r := range b.K() {
		lo, hi := b.Range(r)
		for _, u := range in.Indices[in.Indptr[lo]:in.Indptr[hi]] {
			if int64(u) < lo || int64(u) >= hi {
				n++
			}
		}
	}
	return n
}

// Evaluator is Run's evaluation on one device: the whole graph with all
// neighbors (Eval "full") or sampled mini-batches of the evaluation nodes.
type Evaluator struct{ ev *evaluator }

// NewEvaluator evaluates on b the dataset ds with its feature table x
// (as Features returns it; sparse selects the sparse first-layer
// product) under cfg's Eval settings. Full evaluation uploads the graph
// and the features now.
func NewEvaluator(b backend.Backend, ds *dataset.Dataset, x []float32, sparse bool, cfg train.Config) (*Evaluator, error) {
	in := ds.InGraph()
	if in == nil {
		return nil, fmt.Errorf("dsp: evaluator: invalid graph")
	}
	if int64(len(x)) != ds.NumNodes()*int64(ds.FeatDim) {
		return nil, fmt.Errorf("dsp: evaluator: %d feature values for %d nodes x %d", len(x), ds.NumNodes(), ds.FeatDim)
	}
	s := &shared{cfg: Config{Train: cfg}, pd: &partitioned{ds: ds}, in: in, x: x, dim: ds.FeatDim, sparse: sparse}
	ev, err := newEvaluator(b, s)
	if err != nil {
		return nil, err
	}
	return &Evaluator{ev: ev}, nil
}

// Run evaluates model: accuracies on the train, validation and test nodes
// and the validation loss.
func (e *Evaluator) Run(model nn.Model) (train.EpochRecord, error) { return e.ev.run(model) }

// Shardable reports whether the evaluation can be spread over devices
// (sampled evaluation; the whole-graph pass cannot).
func (e *Evaluator) Shardable() bool { return e.ev.sampler != nil }

// RunShard is Run spread over k devices: this one (rank) evaluates every
// k-th evaluation batch from batch rank on, and sum must add the k
// devices' sums in place (an all-reduce of 7 float64 values; every device
// calls RunShard). The batches and their neighborhoods are Run's, so the
// accuracies equal Run's exactly; the validation loss may differ in the
// last bits (summation order).
func (e *Evaluator) RunShard(model nn.Model, rank, k int, sum func([]float64) error) (train.EpochRecord, error) {
	if !e.Shardable() {
		return train.EpochRecord{}, fmt.Errorf("dsp: whole-graph evaluation cannot be split over devices (use sampled evaluation)")
	}
	if k < 1 || rank < 0 || rank >= k || sum == nil {
		return train.EpochRecord{}, fmt.Errorf("dsp: evaluation shard %d of %d", rank, k)
	}
	out, err := e.ev.logitsSampled(model, rank, k)
	if err != nil {
		return train.EpochRecord{}, err
	}
	t := e.ev.scoreLogits(func(v int32) []float32 { return out[v] })
	if err := sum(t[:]); err != nil {
		return train.EpochRecord{}, err
	}
	return t.record(), nil
}

// SumOver returns a RunShard sum over c: it all-gathers every rank's
// values (as bits) and adds them in rank order, so every rank gets the
// same float64 result whatever the back end's reduction order.
func SumOver(ctx context.Context, c comm.Comm) func([]float64) error {
	return func(v []float64) error {
		k := c.Size()
		mine := make([]int64, len(v))
		for i, x := range v {
			mine[i] = int64(math.Float64bits(x))
		}
		all := make([]int64, k*len(v))
		if err := c.AllGather(ctx, comm.I64(all), comm.I64(mine)); err != nil {
			return err
		}
		for i := range v {
			v[i] = 0
			for r := range k {
				v[i] += math.Float64frombits(uint64(all[r*len(v)+i]))
			}
		}
		return nil
	}
}

// Free releases the device memory the evaluator holds.
func (e *Evaluator) Free() {
	if e != nil {
		e.ev.free()
	}
}

// CheckReplicas verifies that the k devices of c end with the same
// parameters, bit for bit: each hashes its parameters on b and all-gathers
// the hashes over c. Every device must call it.
func CheckReplicas(ctx context.Context, b backend.Backend, params []*nn.Param, c comm.Comm, k int) error {
	h := fnv.New64a()
	for _, p := range params {
		data := make([]float32, p.Len())
		if err := b.Download(data, p.Value); err != nil {
			return err
		}
		for _, v := range data {
			bits := math.Float32bits(v)
			h.Write([]byte{byte(bits), byte(bits >> 8), byte(bits >> 16), byte(bits >> 24)})
		}
	}
	all := make([]int64, k)
	if err := c.AllGather(ctx, comm.I64(all), comm.I64([]int64{int64(h.Sum64())})); err != nil {
		return err
	}
	for r, x := range all {
		if x != all[0] {
			return fmt.Errorf("device %d's parameters differ from device 0's", r)
		}
	}
	return nil
}

// WholeGraphSampler samples the batches of collective sampling with
// scheme (NodeWise or LayerWise) on the host over the whole graph in:
// sample.NeighborSampler, or csp.LayerSampler alone on a one-rank group
// whose patch is the whole graph (collective batches depend only on the
// graph, the seeds and the key, not on the partition). done releases it.
func WholeGraphSampler(in *graph.CSR, scheme string, fanouts []int, replace, weighted bool) (s sample.Sampler, done func() error, err error) {
	ss, done, err := wholeGraphSamplers(in, scheme, fanouts, replace, weighted, 1, 0)
	if err != nil {
		return nil, done, err
	}
	return ss[0], done, nil
}

// wholeGraphSamplers returns n samplers of WholeGraphSampler's batches
// that n goroutines may use at once, one each: node-wise one
// sample.NeighborSampler (safe for concurrent use) whose Sample calls use
// up to inner goroutines each (0: GOMAXPROCS), layer-wise n
// csp.LayerSamplers (not safe for concurrent use) over one whole-graph
// patch, each alone on its own one-rank group. done releases them.
func wholeGraphSamplers(in *graph.CSR, scheme string, fanouts []int, replace, weighted bool, n, inner int) (ss []sample.Sampler, done func() error, err error) {
	nothing := func() error { return nil }
	if n < 1 {
		return nil, nothing, fmt.Errorf("dsp: %d whole-graph samplers", n)
	}
	ss = make([]sample.Sampler, n)
	if scheme != LayerWise {
		s, err := sample.NewNeighborSampler(in, sample.Config{Fanouts: fanouts, Replace: replace, Weighted: weighted, Workers: inner})
		if err != nil {
			return nil, nothing, err
		}
		for i := range ss {
			ss[i] = s
		}
		return ss, nothing, nil
	}
	p, b, err := layout.BuildWhole(in, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		return nil, nothing, err
	}
	var groups []comm.Comm
	done = func() error {
		var first error
		for _, c := range groups {
			if err := c.Close(); first == nil {
				first = err
			}
		}
		return first
	}
	for i := range ss {
		cs, err := inproc.New(1, comm.Options{})
		if err != nil {
			done()
			return nil, nothing, err
		}
		groups = append(groups, cs[0])
		ls, err := csp.NewLayerSampler(cs[0], b, p, csp.Config{Fanouts: fanouts, Replace: replace, Weighted: weighted, Workers: 1}, nil)
		if err != nil {
			done()
			return nil, nothing, err
		}
		ss[i] = ls
	}
	return ss, done, nil
}
