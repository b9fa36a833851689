package sample

import (
	"math"
	"slices"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// Config configures a NeighborSampler.
type Config struct {
	// Fanouts lists how many in-neighbors to sample per destination, one
	// entry per hop, seeds' hop first: Fanouts[0] applies to the seeds and
	// builds the last block of the MiniBatch. -1 takes every neighbor.
	// (DGL lists fanouts innermost-first; PyG seeds-first, like here.)
	Fanouts []int
	// Replace draws with replacement: exactly fanout draws for every node
	// with at least one (positive-weight) neighbor, repeats possible.
	// Without it a node yields min(fanout, degree) distinct edges.
	Replace bool
	// Weighted draws neighbors with probability proportional to the graph's
	// edge Weights (which must be finite and >= 0); zero-weight edges are
	// never drawn (except by fanout -1, which takes every edge).
	Weighted bool
	// Workers is the number of goroutines one Sample call uses; 0 means
	// GOMAXPROCS. It never changes the result.
	Workers int
}

// NeighborSampler is the node-wise (GraphSAGE) sampler over an
// in-adjacency CSR: row v lists v's in-neighbors (pass graph.Transpose of
// an out-adjacency for a directed graph; a symmetric graph is its own).
//
// Each hop draws, for every destination v, a set of edges from row v with
// the random stream rng.Derive(hop key, v), where the hop key folds (Key.Seed,
// Key.Epoch, Key.Batch, hop). Rules per node (n = degree, k = fanout):
//
//   - k == -1 or (k >= n without replacement): all n edges, in row order;
//   - uniform without replacement: Floyd's algorithm, k random draws and
//     O(k) memory however large n is, edges in row order;
//   - uniform with replacement: k independent draws, in draw order;
//   - weighted with replacement: k draws from a per-row alias table built
//     once in NewNeighborSampler (8 bytes per edge, both weighted modes),
//     in draw order;
//   - weighted without replacement: successive sampling proportional to
//     weight, by alias draws that reject repeats (about k draws), finished
//     by exponential-key reservoir sampling (A-ES with jumps, A-ExpJ) when
//     a few heavy edges make rejections frequent; edges in row order.
//
// Block.EdgeIDs are positions in the graph's Indices. A NeighborSampler is
// safe for concurrent use; each concurrent Sample call holds a relabeling
// map of 4 bytes per node, kept for reuse.
type NeighborSampler struct {
	g      *graph.CSR
	cfg    Config
	posDeg []int32   // weighted: positive-weight entries per row
	prob   []float32 // weighted: alias tables, per edge
	alias  []int32
	build  *blockBuilder
}

// NewNeighborSampler checks g and cfg and prepares the sampler. g must be
// valid and square; it is shared, not copied, and must not change while
// the sampler is in use.
func NewNeighborSampler(g *graph.CSR, cfg Config) (*NeighborSampler, error) {
	const op = "NewNeighborSampler"
	if err := g.Validate(); err != nil {
		return nil, graphError(op, err)
	}
	if g.NumRows != g.NumCols {
		return nil, errorf(op, "graph", -1, ErrGraph, "%d x %d is not square", g.NumRows, g.NumCols)
	}
	if len(cfg.Fanouts) == 0 {
		return nil, errorf(op, "Fanouts", -1, ErrConfig, "empty: need one fanout per hop")
	}
	for i, f := range cfg.Fanouts {
		if f != -1 && f <= 0 {
			return nil, errorf(op, "Fanouts", i, ErrConfig, "%d: want -1 (all) or > 0", f)
		}
	}
	if cfg.Workers < 0 {
		return nil, errorf(op, "Workers", -1, ErrConfig, "%d < 0", cfg.Workers)
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	s := &NeighborSampler{g: g, cfg: cfg}
	if cfg.Weighted {
		if err := s.prepareWeights(op); err != nil {
			return nil, err
		}
	}
	s.build = newBlockBuilder(s, true)
	return s, nil
}

// NewFullNeighborSampler takes every in-neighbor at each of layers hops.
func NewFullNeighborSampler(g *graph.CSR, layers int) (*NeighborSampler, error) {
	if layers <= 0 {
		return nil, errorf("NewFullNeighborSampler", "layers", -1, ErrConfig, "%d: want > 0", layers)
	}
	f := make([]int, layers)
	for i := range f {
		f[i] = -1
	}
	return NewNeighborSampler(g, Config{Fanouts: f})
}

func (s *NeighborSampler) prepareWeights(op string) error {
	g := s.g
	if g.Weights == nil {
		return errorf(op, "graph.Weights", -1, ErrGraph, "nil, but Weighted sampling needs edge weights")
	}
	for e, w := range g.Weights {
		if !(w >= 0) || math.IsInf(float64(w), 1) {
			return errorf(op, "graph.Weights", e, ErrGraph, "%v: weights must be finite and >= 0", w)
		}
	}
	n := int(g.NumRows)
	s.posDeg = make([]int32, n)
	s.prob = make([]float32, len(g.Weights))
	s.alias = make([]int32, len(g.Weights))
	parallelFor(n, 1024, resolveWorkers(s.cfg.Workers), func() func(lo, hi int) {
		var a aliasScratch
		return func(lo, hi int) {
			for v := lo; v < hi; v++ {
				a0, a1 := g.Indptr[v], g.Indptr[v+1]
				var c int32
				for _, w := range g.Weights[a0:a1] {
					if w > 0 {
						c++
					}
				}
				s.posDeg[v] = c
				a.buildAlias(g.Weights[a0:a1], s.prob[a0:a1], s.alias[a0:a1])
			}
		}
	})
	return nil
}

// Graph returns the in-adjacency being sampled.
func (s *NeighborSampler) Graph() *graph.CSR { return s.g }

// NumNodes is the number of nodes of the graph.
func (s *NeighborSampler) NumNodes() int64 { return s.g.NumRows }

// NumHops is len(Fanouts), the number of blocks per MiniBatch.
func (s *NeighborSampler) NumHops() int { return len(s.cfg.Fanouts) }

// Sample draws the MiniBatch of seeds for key. Seeds must be distinct and
// in [0, NumNodes). The result depends only on (graph, config, seeds, key).
func (s *NeighborSampler) Sample(seeds []graph.NodeID, key Key) (*MiniBatch, error) {
	return s.build.sample("NeighborSampler.Sample", seeds, key)
}

// count is how many edges node v, of degree n, yields at fanout k.
func (s *NeighborSampler) count(v graph.NodeID, n int64, k int) int64 {
	if k < 0 {
		return n
	}
	avail := n
	if s.cfg.Weighted {
		avail = int64(s.posDeg[v])
	}
	if s.cfg.Replace {
		if avail == 0 {
			return 0
		}
		return int64(k)
	}
	return min(int64(k), avail)
}

// pick writes the len(out) sampled edge IDs of node v, whose row is
// Indices[base:base+n], into out.
func (s *NeighborSampler) pick(p *picker, v graph.NodeID, base, n int64, k int, key uint64, out []int64) {
	g := s.g
	if int64(len(out)) == n && (k < 0 || !s.cfg.Replace) {
		// All edges (fanout -1, or the fanout covers the row).
		for j := range out {
			out[j] = base + int64(j)
		}
		return
	}
	var sel []uint64
	switch {
	case s.cfg.Weighted && s.cfg.Replace:
		sel = p.aliasReplace(key, s.prob[base:base+n], s.alias[base:base+n], uint64(len(out)))
	case s.cfg.Weighted:
		if int64(len(out)) == int64(s.posDeg[v]) {
			// Every positive-weight edge.
			j := 0
			for e, w := range g.Weights[base : base+n] {
				if w > 0 {
					out[j] = base + int64(e)
					j++
				}
			}
			return
		}
		sel = p.weightedNoReplace(key, g.Weights[base:base+n], s.prob[base:base+n], s.alias[base:base+n], len(out))
	case s.cfg.Replace:
		sel = p.uniformReplace(key, uint64(n), uint64(len(out)))
	default:
		sel = p.uniformNoReplace(key, uint64(n), uint64(len(out)))
	}
	for j, pos := range sel {
		out[j] = base + int64(pos)
	}
}

// SampleHop draws the in-neighbors of dst for one hop (hop 0 = the seeds'
// hop, using Fanouts[hop]). It is the building block of Sample, exposed so
// that other samplers (e.g. a distributed one that routes each node to the
// machine owning its row) can reuse it; dst need not be distinct here.
func (s *NeighborSampler) SampleHop(dst []graph.NodeID, hop int, key Key) (*Neighbors, error) {
	return s.sampleHop("NeighborSampler.SampleHop", dst, hop, HopKey(key, hop))
}

// SampleHopKey is SampleHop with the hop's key hk = HopKey(key, hop)
// given instead of the batch key: for a distributed sampler whose owners
// receive hop keys (dsp/csp's protocol sends them in its headers).
func (s *NeighborSampler) SampleHopKey(dst []graph.NodeID, hop int, hk uint64) (*Neighbors, error) {
	return s.sampleHop("NeighborSampler.SampleHopKey", dst, hop, hk)
}

func (s *NeighborSampler) sampleHop(op string, dst []graph.NodeID, hop int, hk uint64) (*Neighbors, error) {
	if hop < 0 || hop >= len(s.cfg.Fanouts) {
		return nil, errorf(op, "hop", -1, ErrConfig, "%d not in [0, %d)", hop, len(s.cfg.Fanouts))
	}
	if err := checkNodes(op, "dst", dst, s.g.NumRows); err != nil {
		return nil, err
	}
	k := s.cfg.Fanouts[hop]
	workers := resolveWorkers(s.cfg.Workers)
	nd := len(dst)
	// Three passes, each a simple loop over independent loads so the CPU
	// can overlap cache misses: row bounds and counts, then edge picks
	// (no graph reads for uniform draws), then the gather of neighbor IDs.
	indptr := make([]int64, nd+1)
	rows := make([]rowSpan, nd)
	parallelFor(nd, 8192, workers, func() func(lo, hi int) {
		return func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v := dst[i]
				a, b := s.g.Indptr[v], s.g.Indptr[v+1]
				rows[i] = rowSpan{a, b - a}
				indptr[i+1] = s.count(v, b-a, k)
			}
		}
	})
	for i := range nd {
		indptr[i+1] += indptr[i]
	}
	ne := indptr[nd]
	if ne > math.MaxInt32 {
		return nil, errorf(op, "dst", -1, ErrTooLarge, "hop %d would sample %d edges (> 2^31-1)", hop, ne)
	}
	nb := &Neighbors{Indptr: indptr, Nodes: make([]graph.NodeID, ne), EdgeIDs: make([]int64, ne)}
	parallelFor(nd, 256, workers, func() func(lo, hi int) {
		var p picker
		return func(lo, hi int) {
			for i := lo; i < hi; i++ {
				a, b := indptr[i], indptr[i+1]
				if a == b {
					continue
				}
				v := dst[i]
				s.pick(&p, v, rows[i].start, rows[i].n, k, rng.Derive(hk, uint64(v)), nb.EdgeIDs[a:b])
			}
		}
	})
	parallelFor(int(ne), 16384, workers, func() func(lo, hi int) {
		return func(lo, hi int) {
			nodes, eids := nb.Nodes[lo:hi], nb.EdgeIDs[lo:hi]
			for j, e := range eids {
				nodes[j] = s.g.Indices[e]
			}
		}
	})
	return nb, nil
}

// rowSpan is a row's position and length in the graph's Indices.
type rowSpan struct{ start, n int64 }

func checkNodes(op, field string, ids []graph.NodeID, n int64) error {
	for i, v := range ids {
		if v < 0 || int64(v) >= n {
			return errorf(op, field, i, ErrNode, "%d not in [0, %d)", v, n)
		}
	}
	return nil
}
