package graph

// Transpose returns the transpose of g: row c of the result lists the rows
// of g that contain c, in increasing order (so every output row is sorted;
// an entry repeated in a row of g appears repeated, in edge order).
// Weights follow their edges. For a graph stored by source (out-adjacency)
// this is the in-adjacency (CSC), and vice versa.
//
// It is a parallel counting sort (one column histogram per chunk of rows,
// prefix sums, scatter): O(E + NumCols * chunks) work, and the output is
// the same for any GOMAXPROCS.
func Transpose(g *CSR) (*CSR, error) {
	t, _, err := transpose("Transpose", g, false)
	return t, err
}

// TransposePerm is Transpose that also returns perm, where perm[e] is the
// position in g.Indices of the edge now at position e of the result. Use it
// to carry per-edge data (features, IDs) through the transpose.
func TransposePerm(g *CSR) (*CSR, []int64, error) {
	return transpose("TransposePerm", g, true)
}

// Reverse returns the graph with every edge u->v turned into v->u. For a
// directed graph in CSR this is exactly Transpose (the reverse graph's
// out-adjacency is the original's in-adjacency); the name says the intent.
func Reverse(g *CSR) (*CSR, error) {
	t, _, err := transpose("Reverse", g, false)
	return t, err
}

func transpose(op string, g *CSR, wantPerm bool) (*CSR, []int64, error) {
	if err := g.validate(op); err != nil {
		return nil, nil, err
	}
	ne := g.NumEdges()
	nc := g.NumCols
	rb := rowBounds(g.Indptr, histParts(ne, nc), minChunk)
	parts := len(rb) - 1

	hist := make([]int64, int64(parts)*nc)
	run(rb, func(p int, lo, hi int64) {
		h := hist[int64(p)*nc : int64(p+1)*nc]
		for _, c := range g.Indices[g.Indptr[lo]:g.Indptr[hi]] {
			h[c]++
		}
	})
	indptr := histToOffsets(hist, parts, nc)

	t := &CSR{NumRows: nc, NumCols: g.NumRows, Indptr: indptr, Indices: make([]NodeID, ne)}
	if g.Weights != nil {
		t.Weights = make([]float32, ne)
	}
	var perm []int64
	if wantPerm {
		perm = make([]int64, ne)
	}
	// Chunk p scatters its rows in order into its own slots of each column,
	// so column c receives rows in increasing order whatever the chunking.
	run(rb, func(p int, lo, hi int64) {
		off := hist[int64(p)*nc : int64(p+1)*nc]
		for r := lo; r < hi; r++ {
			for e := g.Indptr[r]; e < g.Indptr[r+1]; e++ {
				c := g.Indices[e]
				pos := off[c]
				off[c] = pos + 1
				t.Indices[pos] = NodeID(r)
				if t.Weights != nil {
					t.Weights[pos] = g.Weights[e]
				}
				if perm != nil {
					perm[pos] = e
				}
			}
		}
	})
	return t, perm, nil
}
