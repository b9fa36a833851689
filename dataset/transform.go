package dataset

import "github.com/strata-gnn/strata/graph"

// RowNormalize returns a new feature matrix in which every row of the
// numRows x dim row-major matrix x is divided by its sum (the GCN/GAT
// preprocessing); rows summing to zero are copied unchanged. x is never
// modified, so it may be a read-only mapping. Sums are accumulated in
// float64 in row order, so the result is deterministic.
func RowNormalize(x []float32, dim int) []float32 {
	out := make([]float32, len(x))
	if dim <= 0 {
		return out
	}
	for r := 0; r+dim <= len(x); r += dim {
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

// InGraph returns the in-adjacency: row v lists the sources of v's incoming
// edges, which is what message passing aggregates. For an undirected
// dataset (both directions stored, so the graph is symmetric) that is Graph
// itself; for a directed one it is a new transposed CSR (edge weights
// follow their edges; each row lists sources in ascending order of source
// row, so the result is deterministic).
func (d *Dataset) InGraph() *graph.CSR {
	if !d.Directed {
		return d.Graph
	}
	return transpose(d.Graph)
}

// transpose is a counting-sort CSR transpose.
// TODO: switch to graph.Transpose once the graph package provides it.
func transpose(g *graph.CSR) *graph.CSR {
	t := &graph.CSR{NumRows: g.NumCols, NumCols: g.NumRows}
	t.Indptr = make([]int64, g.NumCols+1)
	for _, v := range g.Indices {
		t.Indptr[v+1]++
	}
	for i := int64(0); i < g.NumCols; i++ {
		t.Indptr[i+1] += t.Indptr[i]
	}
	next := make([]int64, g.NumCols)
	copy(next, t.Indptr[:g.NumCols])
	t.Indices = make([]graph.NodeID, len(g.Indices))
	if g.Weights != nil {
		t.Weights = make([]float32, len(g.Weights))
	}
	for u := int64(0); u < g.NumRows; u++ {
		for e := g.Indptr[u]; e < g.Indptr[u+1]; e++ {
			v := g.Indices[e]
			p := next[v]
			next[v]++
			t.Indices[p] = graph.NodeID(u)
			if g.Weights != nil {
				t.Weights[p] = g.Weights[e]
			}
		}
	}
	return t
}
