package csp

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// LayerSampler is one rank's layer-wise collective sampler (Fanouts[hop]
// edges for the whole layer, allotted to the frontier by the requester
// and drawn by the owners) with the frontiers, answers and blocks on the
// rank's back end. Its methods
// serialize; Sample is a collective (see the package doc).
type LayerSampler struct {
	member
	cfg Config

	p *lproto
}

// NewLayer prepares rank c.Rank()'s layer-wise sampler, with the
// arguments of New. cfg.Fanouts[hop] is the number of edges drawn for
// the whole layer (1 to 2^24, or -1: every edge of the frontier);
// weighted sampling is with replacement only and needs the patch's edge
// weights (finite, >= 0), as csp.NewLayerSampler requires. A single rank
// (nil communicator) runs the same protocol with local copies. Weighted
// sampling keeps this package's copy of the patch's rows with their
// running weight sums (on a GPU, per-edge arrays in host memory with
// Mapped and Split placements).
func NewLayer(be backend.Backend, patch *layout.Patch, offsets []int64, c comm.Comm, cfg Config) (*LayerSampler, error) {
	o, err := open("csp.NewLayer", be, patch, offsets, c, func() error {
		if err := checkLayerConfig(cfg); err != nil || !cfg.Weighted {
			return err
		}
		w := patch.Graph.Weights
		if int64(len(w)) != patch.Graph.NumEdges() {
			return fmt.Errorf("weighted sampling needs edge weights (%d for %d edges)", len(w), patch.Graph.NumEdges())
		}
		for e, x := range w {
			if !(x >= 0) || math.IsInf(float64(x), 1) {
				return fmt.Errorf("edge %d of the patch has weight %v", e, x)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &LayerSampler{cfg: cfg}
	p := o.proto(&s.member, len(cfg.Fanouts))
	p.fan, p.edgeIDs = cfg.Fanouts, cfg.EdgeIDs
	var lm LayerMachine
	if o.host != nil {
		lm = newCPULayerMachine(o.host, patch, p.off, o.size, cfg)
	} else if lm, err = device.Layer(be, patch, p.off, o.size, cfg); err != nil {
		return nil, o.fail(err)
	}
	s.p = &lproto{proto: p, lm: lm, replace: cfg.Replace, weighted: cfg.Weighted}
	if err = p.setMachine(lm); err == nil {
		s.p.bad, err = lm.Alloc(backend.Int64, int64(2*len(cfg.Fanouts)))
	}
	if err != nil {
		s.Close()
		return nil, o.fail(err)
	}
	return s, nil
}

// NumHops is the number of blocks per batch.
func (s *LayerSampler) NumHops() int { return len(s.cfg.Fanouts) }

// Close releases the sampler's memory (not the communicator, nor
// batches already returned).
func (s *LayerSampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.p != nil {
		return s.p.close(s.p.bad)
	}
	return nil
}

// Sample draws the layer-wise mini-batch of seeds (distinct global IDs)
// with key. It is a collective: every rank calls it the same number of
// times, in the same order (seed counts may differ, including 0). The
// batch lives on this rank's back end and depends only on the graph,
// seeds, key and configuration (edge IDs with Config.EdgeIDs; -1
// without), not on the number of ranks: one rank's batch is the
// single-device layer-wise sampler's.
func (s *LayerSampler) Sample(ctx context.Context, seeds []graph.NodeID, key sample.Key) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.p.errf(-1, ErrInput, "sampler is closed")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return s.p.sampleBatch(ctx, seeds, key, s.p.sample)
}
