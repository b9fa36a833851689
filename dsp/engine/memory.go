package engine

import "github.com/strata-gnn/strata/train"

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
	m.Add("normalized features", "", 4*n*f, 1)
	// Setting up (hotness, the cache plan, gathering rows) leaves copies
	// of the feature table as garbage until the collector runs: measured
	// on Cora, about two.
	m.Add("setup garbage", "", 2*4*n*f, 1)
	if tc.Eval == train.Full {
		m.Add("evaluation", "--hidden", tc.ActivationBytes(n, e, s.FeatDim, s.Classes, false), 1)
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
