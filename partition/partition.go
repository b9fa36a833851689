package partition

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/partition/metis"
)

// Method selects the partitioning algorithm.
type Method string

const (
	// Multilevel is Strata's own multilevel k-way partitioner (the default).
	Multilevel Method = "multilevel"
	// METIS calls METIS_PartGraphKway from libmetis (optional; see
	// package metis). Graphs with 2^31 or more directed edges are refused.
	METIS Method = "metis"
)

// DefaultImbalance is the default tolerance: no part may weigh more than
// 1.03 times the average, per constraint (METIS's default ufactor 30).
const DefaultImbalance = 1.03

// MaxParts bounds Options.K.
const MaxParts = 1 << 16

// maxConstraints bounds Weights.NCon.
const maxConstraints = 8

// Options controls Partition.
type Options struct {
	// K is the number of parts, 1 <= K <= min(MaxParts, number of nodes).
	K int
	// Imbalance is the largest allowed ratio of a part's weight to the
	// average part weight, for every constraint; 0 means DefaultImbalance.
	// Must be in [1, 10].
	Imbalance float64
	// Seed makes runs reproducible: the same graph, options and seed give
	// the same partition, whatever GOMAXPROCS is.
	Seed uint64
	// Method is Multilevel (the default when empty) or METIS.
	Method Method
	// Weights are the per-node balance weights; nil balances node counts.
	Weights *Weights
}

// Stats describes a run.
type Stats struct {
	Levels        int           // graphs in the multilevel hierarchy (input included)
	CoarsestNodes int           // nodes of the coarsest graph
	Prepare       time.Duration // symmetrizing and checking the input
	Partition     time.Duration // the partitioning itself
	// Phases of Partition for the multilevel method.
	Coarsen, Initial, Uncoarsen time.Duration
}

// Result is a partition and its quality.
type Result struct {
	K      int
	Method Method
	Parts  []int32 // part of every node, in [0, K)
	// Edges is the number of undirected edges of the symmetrized graph
	// (self-loops excluded); EdgeCut how many of them join two parts.
	Edges   int64
	EdgeCut int64
	// Constraints names the balance constraints; PartWeights[p*len+c] is
	// the weight of part p under constraint c, and Balance[c] the largest
	// part weight divided by the average (1 is perfect).
	Constraints []string
	PartWeights []int64
	Balance     []float64
	Stats       Stats
}

// Errors wrapped by Partition's input errors.
var (
	ErrInput = errors.New("partition: invalid input")
)

// ErrTooLargeForMETIS is returned (wrapped) for METIS runs on graphs with
// 2^31 or more directed edges, which 32-bit METIS cannot index.
var ErrTooLargeForMETIS = errors.New("partition: graph too large for METIS (2^31 or more directed edges)")

func inputErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInput, fmt.Sprintf(format, args...))
}

// Symmetrize returns the undirected version of g that partitioning works
// on: every edge in both directions, duplicates merged, self-loops
// dropped, rows sorted, no weights.
func Symmetrize(g *graph.CSR) (*graph.CSR, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	u := &graph.CSR{NumRows: g.NumRows, NumCols: g.NumCols, Indptr: g.Indptr, Indices: g.Indices}
	s, err := graph.Symmetrize(u, graph.ReduceFirst)
	if err != nil {
		return nil, err
	}
	return graph.RemoveSelfLoops(s)
}

// Partition splits the nodes of g into opts.K parts, minimizing the number
// of edges between parts under the balance constraints. A directed g is
// symmetrized first (see Symmetrize); edge weights are ignored.
func Partition(ctx context.Context, g *graph.CSR, opts Options) (*Result, error) {
	t0 := time.Now()
	s, err := Symmetrize(g)
	if err != nil {
		return nil, err
	}
	prep := time.Since(t0)
	res, err := PartitionSymmetric(ctx, s, opts)
	if err != nil {
		return nil, err
	}
	res.Stats.Prepare += prep
	return res, nil
}

// PartitionSymmetric is Partition for a graph that is already symmetric,
// with sorted rows and no self-loops (as Symmetrize returns); it checks
// this (in O(E log d)) and refuses other graphs.
func PartitionSymmetric(ctx context.Context, s *graph.CSR, opts Options) (*Result, error) {
	t0 := time.Now()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := checkSymmetric(s); err != nil {
		return nil, err
	}
	o, err := opts.normalize(s.NumRows)
	if err != nil {
		return nil, err
	}
	wg, names, err := buildWGraph(s, o.Weights)
	if err != nil {
		return nil, err
	}
	res := &Result{K: o.K, Method: o.Method, Edges: s.NumEdges() / 2, Constraints: names}
	res.Stats.Prepare = time.Since(t0)
	t1 := time.Now()
	switch o.Method {
	case Multilevel:
		tpw := make([]float64, o.K)
		for i := range tpw {
			tpw[i] = 1 / float64(o.K)
		}
		ub := make([]float64, wg.ncon)
		for i := range ub {
			ub[i] = o.Imbalance
		}
		res.Parts, err = multilevel(ctx, wg, tpw, ub, rng.Derive(o.Seed, 0x9a27), &res.Stats)
	case METIS:
		res.Parts, err = runMETIS(s, wg, o)
	}
	if err != nil {
		return nil, err
	}
	res.Stats.Partition = time.Since(t1)
	res.EdgeCut = EdgeCut(s, res.Parts)
	res.PartWeights, res.Balance = balanceOf(wg, res.Parts, o.K)
	return res, nil
}

func (o Options) normalize(n int64) (Options, error) {
	if o.Method == "" {
		o.Method = Multilevel
	}
	if o.Method != Multilevel && o.Method != METIS {
		return o, inputErr("unknown method %q (want %q or %q)", o.Method, Multilevel, METIS)
	}
	if o.K < 1 || o.K > MaxParts {
		return o, inputErr("k = %d not in [1, %d]", o.K, MaxParts)
	}
	if n > 0 && int64(o.K) > n {
		return o, inputErr("k = %d exceeds the number of nodes %d", o.K, n)
	}
	if o.Imbalance == 0 {
		o.Imbalance = DefaultImbalance
	}
	if !(o.Imbalance >= 1 && o.Imbalance <= 10) {
		return o, inputErr("imbalance %v not in [1, 10]", o.Imbalance)
	}
	return o, nil
}

// buildWGraph wraps s (sharing its arrays) with vertex weights.
func buildWGraph(s *graph.CSR, w *Weights) (*wgraph, []string, error) {
	n := int(s.NumRows)
	g := &wgraph{n: n, xadj: s.Indptr, adj: s.Indices}
	if w == nil {
		g.ncon = 1
		g.vw = make([]int32, n)
		for i := range g.vw {
			g.vw[i] = 1
		}
		g.setTotals()
		return g, []string{string(ConstraintNodes)}, nil
	}
	if err := w.check(n); err != nil {
		return nil, nil, err
	}
	g.ncon = w.NCon
	g.vw = scaleWeights(w.W, w.NCon)
	g.setTotals()
	names := slices.Clone(w.Names)
	if names == nil {
		for c := 0; c < w.NCon; c++ {
			names = append(names, fmt.Sprintf("w%d", c))
		}
	}
	return g, names, nil
}

// weightCap bounds the total weight of a constraint so that part sums of
// coarse vertices stay far from int32 overflow.
const weightCap = 1 << 30

// scaleWeights returns w, or a copy divided (rounding up) by the smallest
// integer that brings every constraint's total under weightCap.
func scaleWeights(w []int32, ncon int) []int32 {
	tot := make([]int64, ncon)
	for i, x := range w {
		tot[i%ncon] += int64(x)
	}
	div := make([]int64, ncon)
	need := false
	for c, t := range tot {
		div[c] = max(1, (t+weightCap-1)/weightCap)
		need = need || div[c] > 1
	}
	if !need {
		return w
	}
	out := make([]int32, len(w))
	for i, x := range w {
		d := div[i%ncon]
		out[i] = int32((int64(x) + d - 1) / d)
	}
	return out
}

func runMETIS(s *graph.CSR, wg *wgraph, o Options) ([]int32, error) {
	if s.NumEdges() >= metis.MaxEntries {
		return nil, fmt.Errorf("%w: %d directed edges", ErrTooLargeForMETIS, s.NumEdges())
	}
	if err := metis.Load(); err != nil {
		return nil, err
	}
	xadj := make([]int32, len(s.Indptr))
	for i, x := range s.Indptr {
		xadj[i] = int32(x)
	}
	mg := &metis.Graph{Xadj: xadj, Adjncy: s.Indices, NCon: wg.ncon, VWgt: wg.vw}
	ub := make([]float32, wg.ncon)
	for i := range ub {
		ub[i] = float32(o.Imbalance)
	}
	r, err := metis.PartGraphKway(mg, metis.Options{K: o.K, UBVec: ub, Seed: int32(o.Seed & math.MaxInt32)})
	if err != nil {
		return nil, err
	}
	return r.Parts, nil
}

// EdgeCut returns the number of undirected edges of the symmetric graph s
// whose endpoints lie in different parts (each stored edge counted once
// per direction, then halved).
func EdgeCut(s *graph.CSR, parts []int32) int64 {
	n := int(s.NumRows)
	sums := make([]int64, (n+(1<<16)-1)>>16)
	parallelFor(len(sums), 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			var c int64
			for v := b << 16; v < min(n, (b+1)<<16); v++ {
				p := parts[v]
				for _, u := range s.Indices[s.Indptr[v]:s.Indptr[v+1]] {
					if parts[u] != p {
						c++
					}
				}
			}
			sums[b] = c
		}
	})
	var t int64
	for _, c := range sums {
		t += c
	}
	return t / 2
}

// balanceOf returns the part weights (k*ncon) and, per constraint, the
// largest part weight over the average.
func balanceOf(g *wgraph, parts []int32, k int) ([]int64, []float64) {
	pw := make([]int64, k*g.ncon)
	for v, p := range parts {
		for c := 0; c < g.ncon; c++ {
			pw[int(p)*g.ncon+c] += int64(g.vw[v*g.ncon+c])
		}
	}
	bal := make([]float64, g.ncon)
	for c := 0; c < g.ncon; c++ {
		var mx int64
		for p := 0; p < k; p++ {
			mx = max(mx, pw[p*g.ncon+c])
		}
		if g.tvw[c] > 0 {
			bal[c] = float64(mx) * float64(k) / float64(g.tvw[c])
		} else {
			bal[c] = 1
		}
	}
	return pw, bal
}

// edgeHash mixes a packed (u, v) pair (one multiply-xorshift round; sums
// of it over edge sets collide with probability about 2^-64 unless
// crafted).
func edgeHash(x uint64) uint64 {
	x *= 0x9E3779B97F4A7C15
	return x ^ x>>29
}

// checkSymmetric verifies that s has strictly increasing rows (sorted, no
// duplicates), no self-loops, and (up to a 2^-64 chance of missing a
// defect) the reverse of every edge: the sum of a hash of (u, v) over all
// edges must equal the sum of the hash of (v, u). That is much cheaper
// than looking up every reverse edge.
func checkSymmetric(s *graph.CSR) error {
	if s.NumRows != s.NumCols {
		return inputErr("graph is %d x %d, not square", s.NumRows, s.NumCols)
	}
	n := int(s.NumRows)
	const block = 1 << 14
	nb := (n + block - 1) / block
	bad := make([]int64, nb)
	fwd := make([]uint64, nb)
	rev := make([]uint64, nb)
	parallelFor(nb, 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			bad[b] = -1
			var f, r uint64
			for v := b * block; v < min(n, (b+1)*block); v++ {
				row := s.Indices[s.Indptr[v]:s.Indptr[v+1]]
				for i, u := range row {
					if int(u) == v || (i > 0 && row[i-1] >= u) {
						if bad[b] < 0 {
							bad[b] = int64(v)
						}
					}
					f += edgeHash(uint64(v)<<32 | uint64(u))
					r += edgeHash(uint64(u)<<32 | uint64(v))
				}
			}
			fwd[b], rev[b] = f, r
		}
	})
	var f, r uint64
	for b := range bad {
		if bad[b] >= 0 {
			return inputErr("row %d: rows must be sorted without duplicates or self-loops (use Symmetrize)", bad[b])
		}
		f += fwd[b]
		r += rev[b]
	}
	if f != r {
		return inputErr("graph is not symmetric: some edge lacks its reverse (use Symmetrize)")
	}
	return nil
}
