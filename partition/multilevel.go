package partition

import (
	"context"
	"math"
	"math/bits"
	"time"

	"github.com/strata-gnn/strata/internal/rng"
)

// coarseSlack lets a refinement move overfill a part by this many weight
// units per unit of gain; the final balancing pass removes the excess.
const coarseSlack = 5.0

// multilevel partitions g into len(tpw) parts: coarsen to a few thousand
// vertices, partition the coarsest graph by recursive bisection, then
// project back level by level with k-way refinement.
func multilevel(ctx context.Context, g *wgraph, tpw []float64, ub []float64, seed uint64, st *Stats) ([]int32, error) {
	k := len(tpw)
	if k == 1 || g.n == 0 {
		return make([]int32, g.n), nil
	}
	log2k := bits.Len(uint(k)) - 1
	coarsenTo := max(g.n/(20*max(log2k, 1)), 30*k)
	maxvw := make([]int64, g.ncon)
	for c := range maxvw {
		maxvw[c] = max(int64(1.5*float64(g.tvw[c])/float64(coarsenTo)), 1)
	}
	stop := func() bool { return ctx.Err() != nil }
	tc := time.Now()
	levels := coarsen(g, coarsenTo, maxvw, rng.Derive(seed, 1), g.ew == nil, stop)
	st.Coarsen = time.Since(tc)
	tc = time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cg := levels[len(levels)-1].g
	st.Levels = len(levels)
	st.CoarsestNodes = cg.n
	nIparts := 5
	if coarsenTo == 30*k {
		nIparts = 4
	}
	minUB := ub[0]
	for _, u := range ub {
		minUB = min(minUB, u)
	}
	ubInit := math.Pow(minUB, 1/math.Log(float64(k)))
	where := make([]int32, cg.n)
	recursiveBisect(cg, tpw, ubInit, nIparts, where, 0, rng.Derive(seed, 2))
	st.Initial = time.Since(tc)
	tc = time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := newKway(k, tpw, ub, g.n, g.ncon, rng.Derive(seed, 3))
	nl := len(levels) - 1
	for i, l := 0, nl; ; i, l = i+1, l-1 {
		r.setLevel(levels[l].g, where)
		if 2*i >= nl && r.imbalance() > balanceSlack {
			r.balance(1)
		}
		r.refine(kwayIters, coarseSlack)
		if l == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		where = project(levels[l-1].cmap, r.where)
		levels[l] = level{} // the coarser graph is no longer needed
	}
	if r.imbalance() > 0 {
		r.balance(kwayIters)
		r.refine(kwayIters, 0)
	}
	st.Uncoarsen = time.Since(tc)
	return r.where, nil
}
