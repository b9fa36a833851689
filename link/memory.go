package link

import (
	"math"

	"github.com/strata-gnn/strata/train"
)

// EstimateMemory estimates what Run allocates for cfg on a dataset of
// shape s besides the dataset itself (train.EstimateMemory's terms, with
// the embedding width in place of the classes): the encoder's, the
// decoder's and the optimizer's state, a row-normalized copy of the
// features, the split (the message-passing graph, in- and
// out-adjacency), a training step (a sampled batch of the step's
// endpoints, or the whole graph, and the decoder's pairs) and the
// evaluation.
func EstimateMemory(cfg Config, s train.Shape) train.MemoryEstimate {
	var m train.MemoryEstimate
	d := float64(cfg.Hidden)
	if cfg.Model == train.GAT {
		d *= float64(cfg.OutHeads)
	}
	dec := 0.0
	if cfg.Decoder == DecoderMLP {
		dec = 4 * 4 * (d*d + 2*d + 1)
	}
	m.Add("model and optimizer", "--hidden", cfg.StateBytes(s.FeatDim, int64(cfg.Hidden))+dec, 1)
	m.Add("normalized features", "", 4*float64(s.Nodes)*float64(s.FeatDim), 1)
	m.Add("edge split", "--split-edges", 2*(8*float64(s.Nodes)+4*float64(s.Edges))+8*float64(s.Edges), 1)
	links := float64(s.Edges) * cfg.Split.Train
	if cfg.BatchSize > 0 {
		links = math.Min(links, float64(cfg.BatchSize))
	}
	pairs := links * float64(1+cfg.NegRatio)
	// The decoder's gathers, product and their gradients: about 6 rows
	// of the embedding width per pair (the MLP's hidden layer: 4 more).
	perPair := 6 * d
	if cfg.Decoder == DecoderMLP {
		perPair += 4 * d
	}
	var step float64
	flag := "--hidden" // the whole graph's activations
	if cfg.Mode == train.Sampled {
		flag = "--batch-size"
		rows, edges := train.SampledRows(s, int(math.Min(2*pairs, float64(s.Nodes))), cfg.Fanouts)
		step = 4*rows*float64(s.FeatDim) + cfg.ActivationBytes(rows, edges, s.FeatDim, int64(cfg.Hidden), true)
	} else {
		step = cfg.ActivationBytes(float64(s.Nodes), float64(s.Edges), s.FeatDim, int64(cfg.Hidden), true)
	}
	m.Add("training step", flag, step+4*pairs*perPair, 1)
	evalPairs := 2 * float64(s.Edges) * (cfg.Split.Val + cfg.Split.Test)
	m.Add("evaluation", "--hidden", cfg.ActivationBytes(float64(s.Nodes), float64(s.Edges), s.FeatDim, int64(cfg.Hidden), false)+4*evalPairs*perPair, 1)
	return m
}
