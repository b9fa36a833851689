package graph

import "math"

// MaxNodes is the largest node count: node IDs are int32.
const MaxNodes = math.MaxInt32

// Validate checks the CSR invariants: 0 <= NumRows, NumCols <= MaxNodes;
// len(Indptr) == NumRows+1; Indptr[0] == 0, non-decreasing, ending at
// len(Indices); every index in [0, NumCols); Weights nil or one per edge.
// It returns nil or an *Error wrapping ErrShape, ErrIndptr, ErrIndex or
// ErrWeights; when several entries are bad it names the first.
func (g *CSR) Validate() error { return g.validate("Validate") }

func (g *CSR) validate(op string) error {
	if g == nil {
		return errorf(op, "graph", -1, ErrShape, "nil graph")
	}
	if g.NumRows < 0 || g.NumRows > MaxNodes {
		return errorf(op, "NumRows", -1, ErrShape, "%d not in [0, %d]", g.NumRows, MaxNodes)
	}
	if g.NumCols < 0 || g.NumCols > MaxNodes {
		return errorf(op, "NumCols", -1, ErrShape, "%d not in [0, %d]", g.NumCols, MaxNodes)
	}
	if int64(len(g.Indptr)) != g.NumRows+1 {
		return errorf(op, "Indptr", -1, ErrShape, "length %d, want NumRows+1 = %d", len(g.Indptr), g.NumRows+1)
	}
	if g.Indptr[0] != 0 {
		return errorf(op, "Indptr", 0, ErrIndptr, "%d, want 0", g.Indptr[0])
	}
	ne := int64(len(g.Indices))
	if last := g.Indptr[g.NumRows]; last != ne {
		return errorf(op, "Indptr", g.NumRows, ErrIndptr, "%d, want len(Indices) = %d", last, ne)
	}
	if g.Weights != nil && int64(len(g.Weights)) != ne {
		return errorf(op, "Weights", -1, ErrWeights, "length %d, want one per edge = %d", len(g.Weights), ne)
	}
	// Monotone indptr (so every row slice is in bounds), then indices.
	if pos := firstBad(g.NumRows, func(lo, hi int64) int64 {
		for r := lo; r < hi; r++ {
			if g.Indptr[r+1] < g.Indptr[r] {
				return r + 1
			}
		}
		return -1
	}); pos >= 0 {
		return errorf(op, "Indptr", pos, ErrIndptr, "%d < Indptr[%d] = %d (must be non-decreasing)",
			g.Indptr[pos], pos-1, g.Indptr[pos-1])
	}
	if pos := firstBadIndex(g.Indices, g.NumCols); pos >= 0 {
		return errorf(op, "Indices", pos, ErrIndex, "%d not in [0, %d)", g.Indices[pos], g.NumCols)
	}
	return nil
}

// firstBadIndex returns the first position of ids holding a value outside
// [0, n), or -1.
func firstBadIndex(ids []NodeID, n int64) int64 {
	return firstBad(int64(len(ids)), func(lo, hi int64) int64 {
		for i, v := range ids[lo:hi] {
			if v < 0 || int64(v) >= n {
				return lo + int64(i)
			}
		}
		return -1
	})
}

// firstBad runs scan over chunks of [0, n) in parallel; scan returns the
// first bad position in its chunk or -1. The lowest one is returned, so the
// answer does not depend on the chunking.
func firstBad(n int64, scan func(lo, hi int64) int64) int64 {
	b := evenBounds(n, parallelism(), 1<<18)
	found := make([]int64, len(b)-1)
	run(b, func(p int, lo, hi int64) { found[p] = scan(lo, hi) })
	for _, f := range found {
		if f >= 0 {
			return f
		}
	}
	return -1
}
