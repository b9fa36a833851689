package fullgraph

import "github.com/strata-gnn/strata/train"

// EstimateMemory estimates the host memory Run allocates for cfg on
// devices devices and a dataset of shape s, besides the dataset itself, so
// that a caller can refuse a configuration that cannot fit before anything
// is sized (docs/limits.md explains each term). hostDevices says the
// devices' memory is host memory (CPU virtual devices); for GPUs only the
// shared parts count.
func EstimateMemory(cfg Config, devices int, s train.Shape, hostDevices bool) train.MemoryEstimate {
	k := max(devices, 1)
	n, e, f := float64(s.Nodes), float64(s.Edges), float64(s.FeatDim)
	tc := &cfg.Common
	var m train.MemoryEstimate
	if k > 1 && cfg.Partition != PartitionRange {
		m.Add("partitioned dataset copy", "", 4*n*f+12*n+4*e, 1)
	}
	m.Add("normalized features", "", 4*n*f, 1)
	if !hostDevices {
		return m
	}
	// Per device: its block's features and adjacency, the model and Adam
	// state, the activations of its block's rows, and the embeddings of
	// every layer as broadcast by all blocks (the input of the next layer's
	// aggregation) with their gradients.
	w := tc.Widths(s.FeatDim, s.Classes)
	gathered := 0.0
	for l := 1; l < len(w)-1; l++ {
		gathered += 2 * 4 * n * w[l]
	}
	rows, edges := n/float64(k), e/float64(k)
	m.Add("block features and adjacency", "--devices", 4*rows*f+8*rows+4*edges, k)
	m.Add("model and optimizer", "--hidden", tc.StateBytes(s.FeatDim, s.Classes), k)
	m.Add("activations and embeddings", "--hidden", tc.ActivationBytes(rows, edges, s.FeatDim, s.Classes, true)+gathered, k)
	return m
}
