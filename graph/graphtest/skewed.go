package graphtest

import (
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// Skewed returns an n-node weighted in-adjacency drawn from seed, with
// the awkward cases samplers must handle: one row in eight is empty, one
// in eight has up to long*avg entries, the rest up to avg; sources are
// uniform with repeats allowed, and weights are whole numbers 0..4, so
// some are zero. Rows are unsorted. Indices and Weights are never nil.
func Skewed(seed uint64, n int64, avg, long int) *graph.CSR {
	s := rng.NewStream(seed)
	g := &graph.CSR{NumRows: n, NumCols: n, Indptr: make([]int64, n+1), Indices: []graph.NodeID{}, Weights: []float32{}}
	for v := int64(0); v < n; v++ {
		var d uint64
		switch s.Below(8) {
		case 0:
			d = 0
		case 1:
			d = s.Below(uint64(long*avg + 1))
		default:
			d = s.Below(uint64(avg + 1))
		}
		for range d {
			g.Indices = append(g.Indices, graph.NodeID(s.Below(uint64(n))))
			g.Weights = append(g.Weights, float32(s.Below(5)))
		}
		g.Indptr[v+1] = int64(len(g.Indices))
	}
	return g
}

// DistinctNodes draws up to k distinct nodes of [0, n) from seed, in the
// order drawn (all n when k >= n).
func DistinctNodes(seed uint64, n int64, k int) []graph.NodeID {
	s := rng.NewStream(seed)
	seen := map[graph.NodeID]bool{}
	var out []graph.NodeID
	for len(out) < k && int64(len(out)) < n {
		v := graph.NodeID(s.Below(uint64(n)))
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
