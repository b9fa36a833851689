package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/csp"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/cudadsp"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"golang.org/x/sync/errgroup"
)

// hotOrder ranks the nodes for the feature cache (hottest first) as
// cfg.Hotness says, before the devices start: the plan decides what each
// device caches. Pre-sampling runs on the devices when they are GPUs
// (presampleOnDevices), else on the host (presampleOnHost); the same
// order either way. seconds is the pre-sampling pass's wall time (0 for
// the other orders).
func (s *shared) hotOrder(ctx context.Context, gpus bool) (hot []graph.NodeID, seconds float64, err error) {
	switch s.cfg.Hotness {
	case cache.ByInDegree:
		hot, err = cache.InDegree(s.in)
		return hot, 0, err
	case cache.ByPageRank:
		hot, err = cache.PageRank(s.in)
		return hot, 0, err
	case cache.ByReversePageRank:
		hot, err = cache.ReversePageRank(s.in)
		return hot, 0, err
	}
	t := time.Now()
	where := "the host"
	if gpus {
		where = fmt.Sprintf("%d GPUs", s.cfg.Devices)
		hot, err = s.presampleOnDevices(ctx)
	} else {
		hot, err = s.presampleOnHost(ctx, runtime.GOMAXPROCS(0))
	}
	seconds = time.Since(t).Seconds()
	if err == nil && s.opts.Log != nil {
		fmt.Fprintf(s.opts.Log, "pre-sampling hotness on %s in %.2fs\n", where, seconds)
	}
	return hot, seconds, err
}

// cachesEverything reports whether the cache plan of budget bytes per
// device puts every row on every device: the budget holds the whole
// table and each device keeps its own copy (replicate over groups of
// one, which auto chooses then). The hotness order cannot change what
// the devices cache then (the feature stores look rows up by node).
// A value takes cache.ValueBytes at the run's precision (2 at bf16).
func (s *shared) cachesEverything(budget int64) bool {
	return cachesEverything(s.cfg, s.pd.ds.NumNodes(), int64(s.dim), budget)
}

// nodeOrder is 0, 1, ..., n-1.
func nodeOrder(n int64) []graph.NodeID {
	ids := make([]graph.NodeID, n)
	for v := range ids {
		ids[v] = graph.NodeID(v)
	}
	return ids
}

// presampleFlushEvery is how many batches a GPU counts before it adds
// its float32 histogram to the host's counts (cudadsp.Presample's
// FlushEvery). A variable for the tests.
var presampleFlushEvery = 1<<24 - 1

// presampleOnDevices is presampleOnHost's pass on the CUDA devices
// (cudadsp.Presample): device r samples device r's batches of the
// presamplePlan with a temporary sampler of the kind it trains with
// (csp node- or layer-wise, or gpusample with the full sampler), alone
// over the whole graph, and counts their input nodes on the device; the
// order is presampleOnHost's, bit for bit. The whole topology goes to
// every device for the pass, within the topology budget (the rest read
// from host memory, as a full sampler does), and is freed before the
// devices set up.
func (s *shared) presampleOnDevices(ctx context.Context) ([]graph.NodeID, error) {
	cfg := &s.cfg
	plan, err := newPresamplePlan(s.pd, cfg)
	if err != nil {
		return nil, err
	}
	if len(plan.batches) != len(s.opts.Backends) {
		return nil, fmt.Errorf("presample: %d devices' batches for %d back ends", len(plan.batches), len(s.opts.Backends))
	}
	topo := cfg.TopologyBytes
	if topo <= 0 {
		topo = layout.NoLimit
	}
	whole, b, err := layout.BuildWhole(s.in, layout.Options{DeviceBytes: topo})
	if err != nil {
		return nil, fmt.Errorf("presample: topology: %w", err)
	}
	for r, be := range s.opts.Backends {
		if !isGPU(be) {
			return nil, fmt.Errorf("presample: back end %d (%s) has no run-time kernels and queue (backend.Kernels, Enqueuer)", r, be.Name())
		}
	}
	pass := cudadsp.Presample{Graph: s.in, Whole: whole, Offsets: b.Offsets(), Batches: plan.batches, Key: plan.key,
		Full: cfg.Sampler == SamplerFull, Layer: cfg.Scheme == LayerWise, Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace,
		Weighted: cfg.Weighted, FlushEvery: presampleFlushEvery}
	total, err := pass.Run(ctx, s.opts.Backends)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return cache.ByCounts(total), nil
}

// presampleScratchBytes bounds the host pass's per-goroutine memory (a
// count array and the sampler's relabeling map, 4 bytes per node each):
// on graphs of hundreds of millions of nodes fewer goroutines run.
const presampleScratchBytes = 4 << 30

// presampleOnHost ranks the nodes by how often the batches of the
// presamplePlan use them as input nodes (ties by ID), sampled on the host
// over the whole graph: collective sampling draws the same batches as a
// whole-graph sampler. The batches are sampled by up to workers
// goroutines, each counting into its own array; the counts are integers,
// so the order does not depend on the number of goroutines.
func (s *shared) presampleOnHost(ctx context.Context, workers int) ([]graph.NodeID, error) {
	cfg, in := &s.cfg, s.in
	plan, err := newPresamplePlan(s.pd, cfg)
	if err != nil {
		return nil, err
	}
	type job struct{ r, i int }
	var jobs []job
	for r, batches := range plan.batches {
		for i := range batches {
			jobs = append(jobs, job{r, i})
		}
	}
	procs := runtime.GOMAXPROCS(0)
	workers = max(min(workers, len(jobs), int(max(presampleScratchBytes/(8*max(in.NumRows, 1)), 1))), 1)
	// Goroutines left over (fewer batches than processors) sample inside
	// each batch (node-wise).
	scfg := sample.Config{Fanouts: cfg.Train.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted, Workers: max(procs/workers, 1)}
	smps, err := wholeGraphSamplers(in, cfg.Scheme == LayerWise, scfg, workers)
	if err != nil {
		return nil, fmt.Errorf("dsp: presample: %w", err)
	}
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
				mb, err := smps[w](plan.batches[r][i], plan.key(r, i))
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

// wholeGraphSamplers returns n samplers of collective sampling's batches
// (node-wise, or layer-wise) over the whole graph in, which n goroutines
// may use at once, one each: node-wise one sample.NeighborSampler (safe
// for concurrent use; cfg.Workers goroutines per batch), layer-wise n
// csp.LayerSamplers on CPU back ends, each alone on the whole graph
// (collective batches depend only on the graph, the seeds and the key,
// not on the partition). Both are freed with the garbage.
func wholeGraphSamplers(in *graph.CSR, layer bool, cfg sample.Config, n int) ([]func([]graph.NodeID, sample.Key) (*sample.MiniBatch, error), error) {
	ss := make([]func([]graph.NodeID, sample.Key) (*sample.MiniBatch, error), n)
	if !layer {
		s, err := sample.NewNeighborSampler(in, cfg)
		if err != nil {
			return nil, err
		}
		for i := range ss {
			ss[i] = s.Sample
		}
		return ss, nil
	}
	p, b, err := layout.BuildWhole(in, layout.Options{DeviceBytes: layout.NoLimit})
	if err != nil {
		return nil, err
	}
	for i := range ss {
		be, err := cpu.New(cpu.Options{})
		if err != nil {
			return nil, err
		}
		ls, err := csp.NewLayer(be, p, b.Offsets(), nil, csp.Config{Fanouts: cfg.Fanouts, Replace: cfg.Replace, Weighted: cfg.Weighted})
		if err != nil {
			return nil, err
		}
		ss[i] = func(seeds []graph.NodeID, key sample.Key) (*sample.MiniBatch, error) {
			bt, err := ls.Sample(context.Background(), seeds, key)
			if err != nil {
				return nil, err
			}
			return bt.Host, nil
		}
	}
	return ss, nil
}
