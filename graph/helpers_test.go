package graph

import (
	"cmp"
	"slices"

	"github.com/strata-gnn/strata/internal/rng"
)

// edge is one stored entry, for reference implementations.
type edge struct {
	r, c NodeID
	w    float32
	pos  int64 // position in the input, to check stability
}

func edgesOf(g *CSR) []edge {
	var out []edge
	for r := int64(0); r < g.NumRows; r++ {
		for e := g.Indptr[r]; e < g.Indptr[r+1]; e++ {
			x := edge{r: NodeID(r), c: g.Indices[e], pos: e}
			if g.Weights != nil {
				x.w = g.Weights[e]
			}
			out = append(out, x)
		}
	}
	return out
}

// fromSortedEdges builds a CSR from edges already in row order.
func fromSortedEdges(rows, cols int64, es []edge, weighted bool) *CSR {
	g := &CSR{NumRows: rows, NumCols: cols, Indptr: make([]int64, rows+1), Indices: []NodeID{}}
	if weighted {
		g.Weights = []float32{}
	}
	for _, e := range es {
		g.Indptr[e.r+1]++
		g.Indices = append(g.Indices, e.c)
		if weighted {
			g.Weights = append(g.Weights, e.w)
		}
	}
	for r := int64(0); r < rows; r++ {
		g.Indptr[r+1] += g.Indptr[r]
	}
	return g
}

// randomCSR draws a rows x cols graph with about avgDeg entries per row,
// unsorted rows, repeats allowed, skewed degrees.
func randomCSR(seed uint64, rows, cols int64, avgDeg int, weighted bool) *CSR {
	s := rng.NewStream(seed)
	g := &CSR{NumRows: rows, NumCols: cols, Indptr: make([]int64, rows+1)}
	for r := int64(0); r < rows; r++ {
		d := int64(0)
		switch s.Below(4) {
		case 0:
			d = 0
		case 1:
			d = int64(s.Below(uint64(4*avgDeg + 1)))
		default:
			d = int64(s.Below(uint64(avgDeg + 1)))
		}
		if cols == 0 {
			d = 0
		}
		for i := int64(0); i < d; i++ {
			g.Indices = append(g.Indices, NodeID(s.Below(uint64(cols))))
			if weighted {
				g.Weights = append(g.Weights, float32(s.Below(1000))/8)
			}
		}
		g.Indptr[r+1] = int64(len(g.Indices))
	}
	if g.Indices == nil {
		g.Indices = []NodeID{}
	}
	if weighted && g.Weights == nil {
		g.Weights = []float32{}
	}
	return g
}

// refTranspose sorts the swapped edges by (row, original row, position).
func refTranspose(g *CSR) *CSR {
	es := edgesOf(g)
	for i := range es {
		es[i].r, es[i].c = es[i].c, es[i].r
	}
	slices.SortStableFunc(es, func(a, b edge) int { return cmp.Compare(a.r, b.r) })
	return fromSortedEdges(g.NumCols, g.NumRows, es, g.Weights != nil)
}

func sameCSR(a, b *CSR) bool {
	return a.NumRows == b.NumRows && a.NumCols == b.NumCols &&
		slices.Equal(a.Indptr, b.Indptr) && slices.Equal(a.Indices, b.Indices) &&
		(a.Weights == nil) == (b.Weights == nil) && slices.Equal(a.Weights, b.Weights)
}
