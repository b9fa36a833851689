package graph

import "slices"

// Symmetrize returns the union of g and its transpose with duplicates
// merged: row v lists, sorted and once each, every u with an edge v->u or
// u->v in g. g must be square. Weights (if any) of the entries merged into
// one edge are combined with r, g's own entries first, then those coming
// from the transpose; note that with ReduceSum a pair stored in both
// directions gets the sum of both weights (use ReduceFirst or ReduceMax to
// keep a symmetric weight as it is).
func Symmetrize(g *CSR, r Reduce) (*CSR, error) {
	const op = "Symmetrize"
	if err := g.validate(op); err != nil {
		return nil, err
	}
	if g.NumRows != g.NumCols {
		return nil, errorf(op, "graph", -1, ErrShape, "%d x %d is not square", g.NumRows, g.NumCols)
	}
	if !r.valid() {
		return nil, errorf(op, "reduce", -1, ErrShape, "unknown %v", r)
	}
	t, _, err := transpose(op, g, false)
	if err != nil {
		return nil, err
	}
	a := g
	if sorted, _ := RowsSorted(g); !sorted {
		a = Clone(g)
		if err := SortRows(a); err != nil {
			return nil, err
		}
	}
	return mergeRows(a, t, r), nil
}

// mergeRows returns the row-wise sorted union of a and b (same shape, rows
// sorted), each index once per row, weights combined with r in the order
// a's entries, then b's.
func mergeRows(a, b *CSR, r Reduce) *CSR {
	n := a.NumRows
	rb := rowBounds(a.Indptr, parallelism(), minChunk)
	counts := make([]int64, n+1)
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			counts[v] = mergeRow(a, b, v, r, nil, nil)
		}
	})
	prefixSum(counts)
	out := &CSR{NumRows: n, NumCols: a.NumCols, Indptr: counts, Indices: make([]NodeID, counts[n])}
	if a.Weights != nil {
		out.Weights = make([]float32, counts[n])
	}
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			s, e := out.Indptr[v], out.Indptr[v+1]
			var w []float32
			if out.Weights != nil {
				w = out.Weights[s:e]
			}
			mergeRow(a, b, v, r, out.Indices[s:e], w)
		}
	})
	return out
}

// mergeRow merges row v of a and b into idx/w (when not nil) and returns
// the number of distinct indices.
func mergeRow(a, b *CSR, v int64, r Reduce, idx []NodeID, w []float32) int64 {
	i, iEnd := a.Indptr[v], a.Indptr[v+1]
	j, jEnd := b.Indptr[v], b.Indptr[v+1]
	k := int64(-1)
	var last NodeID = -1
	for i < iEnd || j < jEnd {
		var c NodeID
		var wt float32
		if j >= jEnd || (i < iEnd && a.Indices[i] <= b.Indices[j]) {
			c = a.Indices[i]
			if w != nil {
				wt = a.Weights[i]
			}
			i++
		} else {
			c = b.Indices[j]
			if w != nil {
				wt = b.Weights[j]
			}
			j++
		}
		if c != last {
			k++
			last = c
			if idx != nil {
				idx[k] = c
			}
			if w != nil {
				w[k] = wt
			}
		} else if w != nil {
			w[k] = r.apply(w[k], wt)
		}
	}
	return k + 1
}

// AddSelfLoops returns g with an edge v->v added to every row v that has
// none (rows that already have one are unchanged, so the operation is
// idempotent). The loop goes before the first entry greater than v, which
// keeps sorted rows sorted. New loops get weight w when g has weights;
// otherwise w is ignored. g must be square.
func AddSelfLoops(g *CSR, w float32) (*CSR, error) {
	const op = "AddSelfLoops"
	if err := g.validate(op); err != nil {
		return nil, err
	}
	if g.NumRows != g.NumCols {
		return nil, errorf(op, "graph", -1, ErrShape, "%d x %d is not square", g.NumRows, g.NumCols)
	}
	n := g.NumRows
	rb := rowBounds(g.Indptr, parallelism(), minChunk)
	counts := make([]int64, n+1)
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			counts[v] = g.Indptr[v+1] - g.Indptr[v]
			if !slices.Contains(g.Indices[g.Indptr[v]:g.Indptr[v+1]], NodeID(v)) {
				counts[v]++
			}
		}
	})
	prefixSum(counts)
	out := &CSR{NumRows: n, NumCols: n, Indptr: counts, Indices: make([]NodeID, counts[n])}
	if g.Weights != nil {
		out.Weights = make([]float32, counts[n])
	}
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			a, b := g.Indptr[v], g.Indptr[v+1]
			pos := out.Indptr[v]
			need := out.Indptr[v+1]-pos > b-a
			for e := a; e < b; e++ {
				if need && g.Indices[e] > NodeID(v) {
					out.Indices[pos] = NodeID(v)
					if out.Weights != nil {
						out.Weights[pos] = w
					}
					pos++
					need = false
				}
				out.Indices[pos] = g.Indices[e]
				if out.Weights != nil {
					out.Weights[pos] = g.Weights[e]
				}
				pos++
			}
			if need {
				out.Indices[pos] = NodeID(v)
				if out.Weights != nil {
					out.Weights[pos] = w
				}
			}
		}
	})
	return out, nil
}

// RemoveSelfLoops returns g without any entry v in row v (all copies),
// keeping the order and weights of the other entries.
func RemoveSelfLoops(g *CSR) (*CSR, error) {
	if err := g.validate("RemoveSelfLoops"); err != nil {
		return nil, err
	}
	n := g.NumRows
	rb := rowBounds(g.Indptr, parallelism(), minChunk)
	counts := make([]int64, n+1)
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			var k int64
			for _, c := range g.Indices[g.Indptr[v]:g.Indptr[v+1]] {
				if c != NodeID(v) {
					k++
				}
			}
			counts[v] = k
		}
	})
	prefixSum(counts)
	out := &CSR{NumRows: n, NumCols: g.NumCols, Indptr: counts, Indices: make([]NodeID, counts[n])}
	if g.Weights != nil {
		out.Weights = make([]float32, counts[n])
	}
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			pos := out.Indptr[v]
			for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
				if g.Indices[e] != NodeID(v) {
					out.Indices[pos] = g.Indices[e]
					if out.Weights != nil {
						out.Weights[pos] = g.Weights[e]
					}
					pos++
				}
			}
		}
	})
	return out, nil
}

// OutDegrees returns the number of entries of every row (len NumRows).
func OutDegrees(g *CSR) ([]int64, error) {
	if err := g.validate("OutDegrees"); err != nil {
		return nil, err
	}
	d := make([]int64, g.NumRows)
	for v := range d {
		d[v] = g.Indptr[v+1] - g.Indptr[v]
	}
	return d, nil
}

// InDegrees returns how many entries name each column (len NumCols): the
// row lengths of the transpose, without building it.
func InDegrees(g *CSR) ([]int64, error) {
	if err := g.validate("InDegrees"); err != nil {
		return nil, err
	}
	ne, nc := g.NumEdges(), g.NumCols
	b := evenBounds(ne, histParts(ne, nc), minChunk)
	parts := len(b) - 1
	hist := make([]int64, int64(parts)*nc)
	run(b, func(p int, lo, hi int64) {
		h := hist[int64(p)*nc : int64(p+1)*nc]
		for _, c := range g.Indices[lo:hi] {
			h[c]++
		}
	})
	if parts == 1 {
		return hist, nil
	}
	d := make([]int64, nc)
	for p := 0; p < parts; p++ {
		for c, x := range hist[int64(p)*nc : int64(p+1)*nc] {
			d[c] += x
		}
	}
	return d, nil
}

// Clone returns a deep copy of g.
func Clone(g *CSR) *CSR {
	if g == nil {
		return nil
	}
	c := *g
	c.Indptr = slices.Clone(g.Indptr)
	c.Indices = slices.Clone(g.Indices)
	c.Weights = slices.Clone(g.Weights)
	return &c
}
