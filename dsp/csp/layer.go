package csp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/dsp/layout"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
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

	gs *gpusample.Sampler // CUDA: the hop API (uniform draws and relabeling)
	p  *lproto
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
func NewLayer(be backend.Backend, patch *layout.Patch, offsets []int64, c comm.DeviceComm, cfg Config) (*LayerSampler, error) {
	const op = "csp.NewLayer"
	rank, size := groupOf(c)
	bad := func(format string, args ...any) (*LayerSampler, error) {
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInput}
	}
	b, msg := checkGroup(patch, offsets, rank, size)
	if msg != "" {
		return bad("%s", msg)
	}
	if err := checkLayerConfig(cfg); err != nil {
		return bad("%v", err)
	}
	if cfg.Weighted {
		w := patch.Graph.Weights
		if int64(len(w)) != patch.Graph.NumEdges() {
			return bad("weighted sampling needs edge weights (%d for %d edges)", len(w), patch.Graph.NumEdges())
		}
		for e, x := range w {
			if !(x >= 0) || math.IsInf(float64(x), 1) {
				return bad("edge %d of the patch has weight %v", e, x)
			}
		}
	}
	dev, host, msg := backendOf(be)
	if msg != "" {
		return bad("%s", msg)
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &LayerSampler{member: member{be: be, rank: rank, size: size}, cfg: cfg}
	p := newProto(be, c, b, rank, &s.stats, len(cfg.Fanouts))
	p.fan, p.edgeIDs = cfg.Fanouts, cfg.EdgeIDs
	wrap := func(err error) (*LayerSampler, error) {
		s.Close()
		kind := err
		if errors.Is(err, sample.ErrConfig) || errors.Is(err, sample.ErrGraph) {
			kind = fmt.Errorf("%w: %w", ErrInput, err)
		}
		return nil, &Error{Rank: rank, Op: op, Hop: -1, Err: kind}
	}
	var lm LayerMachine
	if host != nil {
		lm = newCPULayerMachine(host, patch, p.off, size, cfg)
	} else {
		// Uniform draws use gpusample's hop API over the patch; weighted
		// ones read this package's copy of the rows, so gpusample then
		// gets a one-node graph and serves relabeling only.
		gcfg := gpusample.Config{Fanouts: layerGSFanouts, Replace: cfg.Replace, Placement: cfg.Placement}
		if cfg.Placement == gpusample.Split {
			gcfg.DeviceRows = patch.DeviceRowIDs()
		}
		g := patch.Graph
		if cfg.Weighted {
			g, gcfg.Placement, gcfg.DeviceRows = &graph.CSR{NumRows: 1, NumCols: 1, Indptr: []int64{0, 0}}, gpusample.OnDevice, nil
		}
		var err error
		if s.gs, err = gpusample.New(dev, g, gcfg); err != nil {
			return wrap(err)
		}
		if lm, err = newGPULayerMachine(dev, s.gs, patch, p.off, size, cfg); err != nil {
			return wrap(err)
		}
	}
	p.m = lm
	s.p = &lproto{proto: p, lm: lm, replace: cfg.Replace, weighted: cfg.Weighted}
	var err error
	if p.ctl, err = lm.Alloc(backend.Int64, ctlLayout{size}.words()); err != nil {
		return wrap(err)
	}
	if s.p.bad, err = lm.Alloc(backend.Int64, int64(2*len(cfg.Fanouts))); err != nil {
		return wrap(err)
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
	var first error
	if s.p != nil {
		first = s.p.close(s.p.bad)
	}
	if s.gs != nil {
		if err := s.gs.Close(); first == nil {
			first = err
		}
	}
	return first
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
