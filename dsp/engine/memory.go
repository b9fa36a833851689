package engine

import (
	"slices"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/infer"
	"github.com/strata-gnn/strata/train"
)

// uploadChunk is the staging slice a GPU's feature store fills per
// upload of cached rows (feature.uploadChunk).
const uploadChunk = 256 << 20

// EstimateMemory estimates the host memory a run of cfg (normalized) on a
// dataset of shape s allocates besides the dataset itself, per device and
// shared, so that a caller can refuse a configuration that cannot fit
// before anything is sized (docs/limits.md explains each term).
//
// hostDevices says the devices' memory is host memory (CPU virtual
// devices, which read the cached feature rows from the host table in
// place); for GPUs only the shared parts count.
func EstimateMemory(cfg Config, s train.Shape, hostDevices bool) train.MemoryEstimate {
	k := max(cfg.Devices, 1)
	n, e, f := float64(s.Nodes), float64(s.Edges), float64(s.FeatDim)
	tc := &cfg.Train
	var m train.MemoryEstimate

	// Shared: the renumbered copy of the dataset (several devices,
	// partitioned), the in-adjacency, the row-normalized features and the
	// hotness order; device 0's full-graph evaluation.
	if k > 1 && cfg.Partition != Range {
		m.Add("partitioned dataset copy", "", 4*n*f+12*n+4*e, 1)
	}
	m.Add("in-adjacency and hotness", "", 12*n+4*e, 1)
	// The trainer's copy of the features: only when it row-normalizes
	// them (on, or auto with no negative value) or rounds them to
	// bfloat16; otherwise the devices read the dataset's table in place.
	vb := float64(cache.ValueBytes(tc.Prec()))
	if tc.RowNorm == train.RowNormOn || (tc.RowNorm != train.RowNormOff && !s.Signed) || vb == 2 {
		m.Add("normalized features", "", 4*n*f, 1)
	}
	// Setup holds no second whole table: hotness and the cache plan are
	// per-node arrays (counted above and per device below), the patches
	// share the in-adjacency's column indices, a GPU uploads its cached
	// rows through a staging chunk (feature.New), and CPU virtual devices
	// read the table in place. What a GPU does keep on the host is its
	// patch's row offsets and, unless the devices cache every row between
	// them, the whole table pinned for the rows it reads through UVA.
	if !hostDevices {
		m.Add("topology patch (host)", "--devices", 8*(n+1)+n/float64(k), k)
		all := cachesEverything(cfg, s.Nodes, s.FeatDim, cfg.CacheBytes)
		if !all || vb == 2 {
			// Rows reordered or encoded on their way: a staging slice
			// (the table as it is goes up without one).
			m.Add("feature upload staging", "", min(float64(uploadChunk), 4*n*f), k)
		}
		if !holdsTable(cfg, s.Nodes, s.FeatDim, cfg.CacheBytes) {
			m.Add("pinned feature table", "--cache", vb*n*f, k)
		}
	}
	if tc.Eval == train.Full {
		m.Add("evaluation", "--hidden", evalHostBytes(tc, s, hostDevices, k), 1)
	}
	if !hostDevices {
		return m
	}
	// Per device.
	m.Add("topology patch", "--topology-cache", 8*(n/float64(k)+1)+4*e/float64(k), k)
	m.Add("cache location table", "--devices", 9*n, k)
	// Parameters, gradients, optimizer moments, and the host copies and
	// buckets the gradient all-reduce uses.
	p := tc.Params(s.FeatDim, s.Classes)
	m.Add("model and optimizer", "--hidden", tc.StateBytes(s.FeatDim, s.Classes)+8*p, k)
	// Batches: the sampled blocks of one batch in each stage and of
	// QueueCapacity in each of the two queues, the gathered features of
	// one (the devices share the cores: measured on Cora, a device rarely
	// holds more than one gathered batch at the peak), and the trainer's
	// activations.
	seeds := tc.BatchSize // a device's batch has at most its share of the training nodes
	if s.TrainNodes > 0 {
		seeds = int(min(int64(seeds), (s.TrainNodes+int64(k)-1)/int64(k)))
	}
	rows, edges := train.SampledRows(s, seeds, tc.Fanouts)
	q := float64(cfg.QueueCapacity)
	batches := (2*q+3)*(8*edges+8*rows) + 4*rows*f + tc.ActivationBytes(rows, edges, s.FeatDim, s.Classes, true)
	m.Add("batches", "--batch-size", batches, k)
	return m
}

// evalHostBytes is the host memory of a whole-graph evaluation by
// layer-wise inference (package infer): while layer l is computed, its
// input (layer l-1's output; the features for the first) and its output
// are held. Each layer computes only the nodes the one above reads
// (infer's plan): the evaluated nodes at the last, at most those and
// their in-neighbors (s.EvalEdges) below it, every node further down. On
// CPU virtual devices each device's chunks are held too, within infer's
// default budget.
func evalHostBytes(tc *train.Config, s train.Shape, hostDevices bool, k int) float64 {
	w := tc.Widths(s.FeatDim, s.Classes)
	n := float64(s.Nodes)
	rows := make([]float64, len(w)) // rows[l]: the nodes layer l computes
	for l := range rows {
		rows[l] = n
	}
	if L := len(w) - 1; s.EvalNodes > 0 {
		rows[L] = float64(min(s.EvalNodes, s.Nodes))
		if s.EvalEdges > 0 && L > 1 {
			rows[L-1] = min(n, rows[L]+float64(s.EvalEdges))
		}
	}
	peak := 0.0
	for l := 1; l < len(w); l++ {
		in := 0.0
		if l > 1 {
			in = 4 * rows[l-1] * w[l-1]
		}
		peak = max(peak, in+4*rows[l]*w[l])
	}
	if hostDevices {
		// A chunk is at most the budget and at most the device's share
		// of a layer (its rows' inputs and outputs, its edges).
		wmax := slices.Max(w)
		peak += float64(k) * min(infer.DefaultBudget, (8*n*wmax+8*float64(s.Edges))/float64(k))
	}
	return peak + float64(infer.ScratchBytes(s.Nodes, k))
}

// holdsTable reports whether budget bytes per device (negative: the
// whole table) hold every row: then every policy's plan caches each row
// on some device of every group, and no GPU keeps a pinned host copy of
// the table (the engine checks the plan itself: Plan.CachedNodes). A
// smaller budget may still cover every row between the devices of a
// group; the estimate counts the pinned copies then.
func holdsTable(cfg Config, nodes, cols int64, budget int64) bool {
	vb := cache.ValueBytes(cfg.Train.Prec())
	if budget < 0 {
		budget = vb * nodes * cols
	}
	return cols > 0 && budget/(vb*cols) >= nodes
}

// cachesEverything reports whether the cache plan of budget bytes per
// device (negative: the whole table) has every device cache every row.
func cachesEverything(cfg Config, nodes, cols int64, budget int64) bool {
	if !holdsTable(cfg, nodes, cols, budget) {
		return false
	}
	switch cfg.CachePolicy {
	case cache.Auto:
		return true
	case cache.Replicate:
		return cfg.CacheGroup <= 1
	}
	return cfg.Devices == 1
}
