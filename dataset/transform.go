package dataset

import "github.com/strata-gnn/strata/graph"

// RowNormalize returns a new feature matrix in which every row of the
// numRows x dim row-major matrix x is divided by its sum (the GCN/GAT
// preprocessing); rows summing to zero are copied unchanged. x is never
// modified, so it may be a read-only mapping. Sums are accumulated in
// float64 in row order, so the result is deterministic; rows are
// independent, so chunks of them are normalized in parallel (the same
// result for any GOMAXPROCS).
func RowNormalize(x []float32, dim int) []float32 {
	out := make([]float32, len(x))
	if dim <= 0 {
		return out
	}
	forChunks(len(x)/dim, max(parallelMin/dim, 1), func(lo, hi int) {
		for r := lo * dim; r < hi*dim; r += dim {
			row := x[r : r+dim]
			var s float64
			for _, v := range row {
				s += float64(v)
			}
			dst := out[r : r+dim]
			if s == 0 {
				copy(dst, row)
				continue
			}
			inv := 1 / s
			for i, v := range row {
				dst[i] = float32(float64(v) * inv)
			}
		}
	})
	return out
}

// WithRowNormalizedFeatures returns a shallow copy of d whose Features are
// RowNormalize(d.Features, d.FeatDim); d is unchanged. The copy shares d's
// other arrays (and mappings: Close d, not the copy).
func (d *Dataset) WithRowNormalizedFeatures() *Dataset {
	c := *d
	c.release = nil
	if d.Features != nil {
		c.Features = RowNormalize(d.Features, d.FeatDim)
	}
	return &c
}

// InAdjacency returns the in-adjacency: row v lists the sources of v's
// incoming edges, which is what message passing aggregates. For an
// undirected dataset (both directions stored, so the graph is symmetric)
// that is Graph itself; for a directed one it is graph.Transpose(Graph), a
// new CSR whose rows are sorted and whose weights follow their edges. It
// fails only if Graph is invalid.
func (d *Dataset) InAdjacency() (*graph.CSR, error) {
	if d == nil || d.Graph == nil {
		return nil, formatErr("dataset", -1, "no graph")
	}
	if !d.Directed {
		return d.Graph, nil
	}
	return graph.Transpose(d.Graph)
}

// InGraph is InAdjacency for datasets known to be valid (every dataset
// returned by Open, an importer, builtin.Load or passing Validate); it
// returns nil if the graph is invalid.
func (d *Dataset) InGraph() *graph.CSR {
	g, err := d.InAdjacency()
	if err != nil {
		return nil
	}
	return g
}
