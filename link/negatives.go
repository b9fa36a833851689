package link

import (
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/sample"
)

// Negatives draws the training negatives of a step: NegRatio node pairs
// per positive edge, both endpoints drawn independently from the
// negative distribution (uniform, or in-degree^0.75), as PyG's binary
// negative sampling draws them and as the evaluation's negatives are
// drawn (uniform pairs), keyed by (seed, epoch, batch). The sources come
// from package sample's sampler without exclusion, the destinations from
// the same sampler given those sources.
//
// With NegExclude a destination is redrawn (up to negTrials draws, then
// kept, as sample's samplers do) while the pair is a known edge, a training edge
// of the message-passing graph, or a self-pair. The held-out edges are
// unknown to training, so they are never excluded: excluding them would
// tell the model which pairs are the validation and test links.
type Negatives struct {
	srcs, dsts sample.NegativeSampler
	k          int
	seed       uint64
}

// negTrials bounds the draws of an excluded negative's destination: a
// node whose known edges cover a share q of the nodes keeps a known pair
// with probability q^negTrials (1e-6 for q = 1/2).
const negTrials = 20

// NewNegatives makes cfg's training negatives over split s.
func NewNegatives(s *Split, cfg *Config) (*Negatives, error) {
	if cfg.NegSample == NegDegree {
		w := DegreeWeights(s.In)
		return newNegatives(s, cfg, w, w)
	}
	return newNegatives(s, cfg, nil, nil)
}

// newNegatives draws the sources from srcW and the destinations from
// dstW, weights over s's nodes (package sample's WeightedNegativeSampler;
// nil: its UniformNegativeSampler over all nodes). A typed run's weights
// are zero outside each endpoint's type (heteroNegatives).
func newNegatives(s *Split, cfg *Config, srcW, dstW []float32) (*Negatives, error) {
	known := s.Out
	if cfg.NegExclude {
		var err error
		if known, err = graph.AddSelfLoops(s.Out, 1); err != nil {
			return nil, err
		}
	}
	n := &Negatives{k: cfg.NegRatio, seed: rng.Derive(cfg.Seed, tagNegative)}
	mk := func(g *graph.CSR, w []float32, nc sample.NegativeConfig) (sample.NegativeSampler, error) {
		if w != nil {
			return sample.NewWeightedNegativeSampler(g, w, nc)
		}
		return sample.NewUniformNegativeSampler(g, nc)
	}
	var err error
	if n.srcs, err = mk(s.Out, srcW, sample.NegativeConfig{K: cfg.NegRatio}); err != nil {
		return nil, err
	}
	if n.dsts, err = mk(known, dstW, sample.NegativeConfig{K: 1, ExcludeEdges: cfg.NegExclude, Trials: negTrials}); err != nil {
		return nil, err
	}
	return n, nil
}

// DegreeWeights are in-degree^0.75 of every node of in (an
// in-adjacency: row lengths are in-degrees), the degree-biased negative
// distribution. Given an out-adjacency they are out-degree^0.75.
func DegreeWeights(in *graph.CSR) []float32 {
	w := make([]float32, in.NumRows)
	for v := range w {
		w[v] = float32(math.Pow(float64(in.Indptr[v+1]-in.Indptr[v]), 0.75))
	}
	return w
}

// Draw returns the k negatives of each positive of pos for step (epoch,
// batch), entries i*k to i*k+k-1 for positive i.
func (n *Negatives) Draw(pos Edges, epoch, batch int) (Edges, error) {
	src, err := n.srcs.Negatives(pos.Src, pos.Dst, sample.Key{Seed: n.seed, Epoch: epoch, Batch: batch})
	if err != nil {
		return Edges{}, err
	}
	dst, err := n.dsts.Negatives(src, src, sample.Key{Seed: rng.Derive(n.seed, 1), Epoch: epoch, Batch: batch})
	if err != nil {
		return Edges{}, err
	}
	return Edges{Src: src, Dst: dst}, nil
}

// heteroNegatives makes a typed run's training negatives over s, the
// split of relation tl's links over the union of its two types' IDs: a
// source-type node paired with a destination-type node, drawn by package
// sample's samplers as NewNegatives draws them. Within one type (tl.off
// 0) the relation is a graph and they are NewNegatives'. Across two
// types: uniform, each endpoint over its own type (weights 1 on the
// type, 0 elsewhere); degree, sources in proportion to their
// out-degree^0.75 and destinations to their in-degree^0.75 in the
// relation's message-passing links (the other type's nodes have no such
// edges, so weight 0). NegExclude redraws a destination while the pair
// is a training link of the relation.
func heteroNegatives(s *Split, tl typedLinks, cfg *Config) (*Negatives, error) {
	if tl.off == 0 {
		return NewNegatives(s, cfg)
	}
	var srcW, dstW []float32
	if cfg.NegSample == NegDegree {
		srcW, dstW = DegreeWeights(s.Out), DegreeWeights(s.In)
	} else {
		srcW, dstW = make([]float32, s.NumNodes), make([]float32, s.NumNodes)
		for v := range srcW {
			if int32(v) < tl.off {
				srcW[v] = 1
			} else {
				dstW[v] = 1
			}
		}
	}
	return newNegatives(s, cfg, srcW, dstW)
}
