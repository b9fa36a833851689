package sample

import (
	"math"
	"math/bits"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// tagWeightedNegative keeps WeightedNegativeSampler's streams apart from
// UniformNegativeSampler's for the same Key.
const tagWeightedNegative = 0x574e454700 // "WNEG"

// WeightedNegativeSampler corrupts destinations with probability
// proportional to a per-node weight: degree-biased negatives when the
// weights are degrees (GraphSAGE's unsupervised loss and word2vec draw
// from degree^0.75), which makes negatives as frequent as the nodes that
// appear in positive edges. Its graph is the out-adjacency, as
// UniformNegativeSampler's, and NegativeConfig's ExcludeEdges and Trials
// work the same way.
type WeightedNegativeSampler struct {
	g     *graph.CSR
	cfg   NegativeConfig
	prob  []float32 // Vose's alias table over the nodes
	alias []int32
}

// NewWeightedNegativeSampler checks g (valid, square; rows sorted when
// ExcludeEdges), cfg and the weights (one per node, finite and >= 0, not
// all zero) and builds the alias table (O(nodes)). A node of weight 0 is
// never drawn.
func NewWeightedNegativeSampler(g *graph.CSR, weights []float32, cfg NegativeConfig) (*WeightedNegativeSampler, error) {
	const op = "NewWeightedNegativeSampler"
	u, err := NewUniformNegativeSampler(g, cfg) // the same checks
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Op = op
		}
		return nil, err
	}
	if int64(len(weights)) != g.NumRows {
		return nil, errorf(op, "weights", -1, ErrConfig, "%d weights for %d nodes", len(weights), g.NumRows)
	}
	var total float64
	for i, w := range weights {
		if !(w >= 0) || math.IsInf(float64(w), 0) {
			return nil, errorf(op, "weights", i, ErrConfig, "%v: want finite and >= 0", w)
		}
		total += float64(w)
	}
	if !(total > 0) || math.IsInf(total, 0) {
		return nil, errorf(op, "weights", -1, ErrConfig, "sum %v: want positive and finite", total)
	}
	s := &WeightedNegativeSampler{g: g, cfg: u.cfg, prob: make([]float32, len(weights)), alias: make([]int32, len(weights))}
	var a aliasScratch
	a.buildAlias(weights, s.prob, s.alias)
	return s, nil
}

// Negatives implements NegativeSampler. The draws for positive i use the
// stream of (key, i); each draw is one random word (column and coin of
// the alias table, as the weighted neighbor sampler draws).
func (s *WeightedNegativeSampler) Negatives(src, dst []graph.NodeID, key Key) ([]graph.NodeID, error) {
	n := uint64(s.g.NumRows)
	return drawNegatives("WeightedNegativeSampler.Negatives", s.g, s.cfg, src, dst, batchKey(key, tagWeightedNegative),
		func(st *rng.Stream) graph.NodeID {
			col, frac := bits.Mul64(st.Uint64(), n)
			coin := float32(frac>>40) * (1.0 / (1 << 24))
			if coin >= s.prob[col] {
				col = uint64(s.alias[col])
			}
			return graph.NodeID(col)
		})
}
