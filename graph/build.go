package graph

import (
	"cmp"
	"fmt"
	"slices"
)

// Reduce says how the weights of duplicate edges are merged when
// duplicates are removed. Without weights it does not matter.
type Reduce int

const (
	ReduceFirst Reduce = iota // keep the first duplicate's weight (in input order)
	ReduceSum                 // add the weights, in input order
	ReduceMax                 // keep the largest weight
	ReduceMin                 // keep the smallest weight
)

func (r Reduce) valid() bool { return r >= ReduceFirst && r <= ReduceMin }

func (r Reduce) String() string {
	switch r {
	case ReduceFirst:
		return "first"
	case ReduceSum:
		return "sum"
	case ReduceMax:
		return "max"
	case ReduceMin:
		return "min"
	}
	return fmt.Sprintf("Reduce(%d)", int(r))
}

func (r Reduce) apply(acc, w float32) float32 {
	switch r {
	case ReduceSum:
		return acc + w
	case ReduceMax:
		return max(acc, w)
	case ReduceMin:
		return min(acc, w)
	}
	return acc
}

// Option configures FromEdges.
type Option func(*buildOptions)

type buildOptions struct {
	weights  []float32
	weighted bool
	dedup    bool
	reduce   Reduce
}

// WithWeights attaches one weight per edge (aligned with src and dst). The
// result has non-nil Weights even when there are no edges.
func WithWeights(w []float32) Option {
	return func(o *buildOptions) { o.weights, o.weighted = w, true }
}

// WithDedup merges repeated (src, dst) pairs into one edge, combining their
// weights with r.
func WithDedup(r Reduce) Option {
	return func(o *buildOptions) { o.dedup, o.reduce = true, r }
}

// FromEdges builds the numNodes x numNodes CSR whose row u lists the dst of
// every edge (u, dst), sorted by dst; repeated pairs stay in input order
// unless WithDedup is given. Inputs are not modified. Errors (all *Error):
// len(src) != len(dst), numNodes outside [0, MaxNodes], an ID outside
// [0, numNodes), weights of the wrong length, an unknown Reduce.
//
// It runs two stable parallel counting sorts (by dst, then by src), so it
// is O(E + numNodes) and its output does not depend on GOMAXPROCS.
func FromEdges(numNodes int64, src, dst []NodeID, opts ...Option) (*CSR, error) {
	const op = "FromEdges"
	var o buildOptions
	for _, f := range opts {
		f(&o)
	}
	if numNodes < 0 || numNodes > MaxNodes {
		return nil, errorf(op, "numNodes", -1, ErrShape, "%d not in [0, %d]", numNodes, MaxNodes)
	}
	if len(src) != len(dst) {
		return nil, errorf(op, "dst", -1, ErrShape, "length %d, but len(src) = %d", len(dst), len(src))
	}
	if o.weighted && o.weights == nil {
		o.weights = []float32{}
	}
	if o.weighted && len(o.weights) != len(src) {
		return nil, errorf(op, "weights", -1, ErrWeights, "length %d, want one per edge = %d", len(o.weights), len(src))
	}
	if !o.reduce.valid() {
		return nil, errorf(op, "reduce", -1, ErrShape, "unknown %v", o.reduce)
	}
	if pos := firstBadIndex(src, numNodes); pos >= 0 {
		return nil, errorf(op, "src", pos, ErrIndex, "%d not in [0, %d)", src[pos], numNodes)
	}
	if pos := firstBadIndex(dst, numNodes); pos >= 0 {
		return nil, errorf(op, "dst", pos, ErrIndex, "%d not in [0, %d)", dst[pos], numNodes)
	}
	// Group by dst (stable), then transpose: rows by src, sorted by dst,
	// repeats in input order.
	byDst := groupBy(dst, src, o.weights, numNodes, numNodes)
	g, _, err := transpose(op, byDst, false)
	if err != nil {
		return nil, err
	}
	if o.dedup {
		g = dedupSorted(g, o.reduce)
	}
	return g, nil
}

// groupBy is a stable parallel counting sort of the items (keys[i], vals[i],
// w[i]) by key: row k of the result lists vals of the items with key k, in
// input order. Inputs must be in range.
func groupBy(keys, vals []NodeID, w []float32, numKeys, numVals int64) *CSR {
	n := int64(len(keys))
	b := evenBounds(n, histParts(n, numKeys), minChunk)
	parts := len(b) - 1
	hist := make([]int64, int64(parts)*numKeys)
	run(b, func(p int, lo, hi int64) {
		h := hist[int64(p)*numKeys : int64(p+1)*numKeys]
		for _, k := range keys[lo:hi] {
			h[k]++
		}
	})
	g := &CSR{NumRows: numKeys, NumCols: numVals, Indptr: histToOffsets(hist, parts, numKeys), Indices: make([]NodeID, n)}
	if w != nil {
		g.Weights = make([]float32, n)
	}
	run(b, func(p int, lo, hi int64) {
		off := hist[int64(p)*numKeys : int64(p+1)*numKeys]
		for i := lo; i < hi; i++ {
			pos := off[keys[i]]
			off[keys[i]] = pos + 1
			g.Indices[pos] = vals[i]
			if w != nil {
				g.Weights[pos] = w[i]
			}
		}
	})
	return g
}

// dedupSorted merges adjacent equal entries of each row (rows must be
// sorted), combining weights with r in entry order.
func dedupSorted(g *CSR, r Reduce) *CSR {
	rb := rowBounds(g.Indptr, parallelism(), minChunk)
	counts := make([]int64, g.NumRows+1)
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			row := g.Indices[g.Indptr[v]:g.Indptr[v+1]]
			var k int64
			for j := range row {
				if j == 0 || row[j] != row[j-1] {
					k++
				}
			}
			counts[v] = k
		}
	})
	prefixSum(counts)
	out := &CSR{NumRows: g.NumRows, NumCols: g.NumCols, Indptr: counts, Indices: make([]NodeID, counts[g.NumRows])}
	if g.Weights != nil {
		out.Weights = make([]float32, len(out.Indices))
	}
	run(rb, func(_ int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			pos := out.Indptr[v] - 1
			for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
				if e == g.Indptr[v] || g.Indices[e] != g.Indices[e-1] {
					pos++
					out.Indices[pos] = g.Indices[e]
					if out.Weights != nil {
						out.Weights[pos] = g.Weights[e]
					}
				} else if out.Weights != nil {
					out.Weights[pos] = r.apply(out.Weights[pos], g.Weights[e])
				}
			}
		}
	})
	return out
}

// SortRows sorts every row of g by index, in place, keeping each weight
// with its edge. The sort is stable: repeated entries keep their order, so
// the result does not depend on GOMAXPROCS. Rows already sorted are only
// scanned.
func SortRows(g *CSR) error {
	if err := g.validate("SortRows"); err != nil {
		return err
	}
	rb := rowBounds(g.Indptr, parallelism(), minChunk)
	run(rb, func(_ int, lo, hi int64) {
		var tmp []weighted
		for v := lo; v < hi; v++ {
			a, b := g.Indptr[v], g.Indptr[v+1]
			row := g.Indices[a:b]
			if slices.IsSorted(row) {
				continue
			}
			if g.Weights == nil {
				slices.Sort(row)
				continue
			}
			tmp = tmp[:0]
			for e := a; e < b; e++ {
				tmp = append(tmp, weighted{g.Indices[e], g.Weights[e]})
			}
			slices.SortStableFunc(tmp, func(x, y weighted) int { return cmp.Compare(x.c, y.c) })
			for i, t := range tmp {
				g.Indices[a+int64(i)], g.Weights[a+int64(i)] = t.c, t.w
			}
		}
	})
	return nil
}

type weighted struct {
	c NodeID
	w float32
}

// RowsSorted reports whether every row of g is sorted (non-decreasing).
func RowsSorted(g *CSR) (bool, error) {
	if err := g.validate("RowsSorted"); err != nil {
		return false, err
	}
	rb := rowBounds(g.Indptr, parallelism(), minChunk)
	ok := make([]bool, len(rb)-1)
	run(rb, func(p int, lo, hi int64) {
		for v := lo; v < hi; v++ {
			if !slices.IsSorted(g.Indices[g.Indptr[v]:g.Indptr[v+1]]) {
				return
			}
		}
		ok[p] = true
	})
	return !slices.Contains(ok, false), nil
}
