package gen

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
)

// paretoMin returns x_m such that a Pareto(x_m, alpha) variable clipped at
// c has mean m (which must lie in (0, c)). The clipped mean
// E[min(X, c)] = x_m + x_m^alpha (c^(1-alpha) - x_m^(1-alpha)) / (1-alpha)
// grows monotonically from 0 to c as x_m goes from 0 to c, so bisection
// finds it.
func paretoMin(m, c, alpha float64) float64 {
	mean := func(xm float64) float64 {
		if math.Abs(alpha-1) < 1e-9 {
			return xm + xm*math.Log(c/xm)
		}
		return xm + xm/(alpha-1)*(1-math.Pow(xm/c, alpha-1))
	}
	lo, hi := 0.0, c
	for range 200 {
		mid := (lo + hi) / 2
		if mean(mid) < m {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// planted holds the per-node draws the edges depend on.
type planted struct {
	weight []float32 // expected degree per node
	label  []int32   // class per node
	// nodes[classStart[k]:classStart[k+1]] is an alias table over class
	// k's members, weighted by expected degree.
	nodes      []slot
	classStart []int64
	classes    []slot // alias table over classes, weighted by total expected degree
}

// plant draws expected degrees and classes and builds the samplers.
func plant(cfg *Config, bar *progress.Bar) *planted {
	n := cfg.NumNodes
	p := &planted{weight: make([]float32, n), label: make([]int32, n)}

	// Class shares (k+1)^-skew, as a cumulative table for inversion.
	C := cfg.NumClasses
	cum := make([]float64, C)
	var s float64
	for k := range C {
		s += math.Pow(float64(k+1), -cfg.ClassSkew)
		cum[k] = s
	}
	for k := range cum {
		cum[k] /= s
	}
	cum[C-1] = 1

	alpha := cfg.Exponent - 1
	xm := paretoMin(cfg.AvgDegree, cfg.MaxDegree, alpha)
	wSeed := key(cfg.Seed, tagWeight, 0)
	cSeed := key(cfg.Seed, tagClass, 0)
	forChunks(n, bar, func(lo, hi int64) {
		for u := lo; u < hi; u++ {
			// Inverse CDF of the Pareto, clipped at MaxDegree.
			w := xm * math.Pow(openUnit(rng.Hash(wSeed, uint64(u))), -1/alpha)
			p.weight[u] = float32(min(w, cfg.MaxDegree))
			r := unit(rng.Hash(cSeed, uint64(u)))
			k, _ := slices.BinarySearch(cum, r)
			p.label[u] = int32(min(k, C-1))
		}
	})

	// Group node IDs by class (a counting sort keeps IDs ascending inside
	// each class), then build one alias table per class, classes in
	// parallel: each table depends only on its own members.
	p.classStart = make([]int64, C+1)
	for _, k := range p.label {
		p.classStart[k+1]++
	}
	for k := range C {
		p.classStart[k+1] += p.classStart[k]
	}
	members := make([]int32, n)
	fill := slices.Clone(p.classStart[:C])
	for u, k := range p.label {
		members[fill[k]] = int32(u)
		fill[k]++
	}
	p.nodes = make([]slot, n)
	classW := make([]float64, C)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(C, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			var w []float64
			for {
				k := int(next.Add(1) - 1)
				if k >= C {
					return
				}
				lo, hi := p.classStart[k], p.classStart[k+1]
				w = w[:0]
				var sum float64
				for _, u := range members[lo:hi] {
					w = append(w, float64(p.weight[u]))
					sum += float64(p.weight[u])
				}
				classW[k] = sum
				buildAlias(p.nodes[lo:hi], members[lo:hi], w)
			}
		})
	}
	wg.Wait()
	ids := make([]int32, C)
	for k := range ids {
		ids[k] = int32(k)
	}
	p.classes = make([]slot, C)
	buildAlias(p.classes, ids, classW)
	return p
}

// maxCrossTries bounds the rejection loop that draws a class other than the
// source's; Validate's ClassSkew bound keeps a failure (the stub is then
// dropped) below 1e-6.
const maxCrossTries = 64

// drawTargets draws, for every stub of node u, its other endpoint: in u's
// class with probability Homophily, else in another class chosen in
// proportion to its total expected degree; inside the class, a node in
// proportion to its expected degree (degree-corrected SBM / Chung-Lu).
// Node u has floor(w/2) or ceil(w/2) stubs (stochastic rounding), and
// receives about w/2 stubs from others, so its expected degree is w.
// Self-loops are marked -1. off has n+1 entries: u's stubs are
// tgt[off[u]:off[u+1]].
func drawTargets(cfg *Config, p *planted, bar *progress.Bar) (off []int64, tgt []int32, err error) {
	n := cfg.NumNodes
	eSeed := key(cfg.Seed, tagEdges, 0)
	off = make([]int64, n+1)
	forChunks(n, bar, func(lo, hi int64) {
		for u := lo; u < hi; u++ {
			off[u+1] = stubCount(p.weight[u], rng.Hash(rng.Hash(eSeed, uint64(u)), 0))
		}
	})
	for u := range n {
		off[u+1] += off[u]
	}
	// Two stored entries per stub; the bound catches overflow before the
	// allocation.
	if off[n] > math.MaxInt64/8 {
		return nil, nil, fmt.Errorf("gen: %s: %d edges drawn, too many", cfg.Name, off[n])
	}
	tgt = make([]int32, off[n])
	homo := cfg.Homophily
	forChunks(n, bar, func(lo, hi int64) {
		for u := lo; u < hi; u++ {
			k := p.label[u]
			ukey := rng.Hash(eSeed, uint64(u))
			ctr := uint64(1) // counter 0 was the stub count
			next := func() uint64 { h := rng.Hash(ukey, ctr); ctr++; return h }
			for j := off[u]; j < off[u+1]; j++ {
				cls := k
				if homo < 1 && unit(next()) >= homo {
					cls = -1
					for range maxCrossTries {
						if c := draw(p.classes, next()); c != k {
							cls = c
							break
						}
					}
				}
				v := int32(-1)
				if cls >= 0 {
					v = draw(p.nodes[p.classStart[cls]:p.classStart[cls+1]], next())
					if int64(v) == u {
						v = -1
					}
				}
				tgt[j] = v
			}
		}
	})
	return off, tgt, nil
}

// stubCount rounds w/2 up or down at random so its mean is w/2.
func stubCount(w float32, h uint64) int64 {
	half := float64(w) / 2
	fl := math.Floor(half)
	if unit(h) < half-fl {
		fl++
	}
	return int64(fl)
}

// maxScanParts bounds the number of destination ranges in buildCSR's
// scans: each part reads every drawn edge, so more parts cost more reads.
const maxScanParts = 8

// forRanges splits [0, n) into parts ranges at bounds(i) (bounds(0) = 0,
// bounds(parts) = n) and runs fn on each concurrently.
func forRanges(parts int, bounds func(i int) int64, fn func(lo, hi int64)) {
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := bounds(i), bounds(i+1)
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}

// buildCSR stores every drawn edge (u, v) both ways, sorted and without
// duplicates. Row x is the merge of x's own drawn targets (sorted per node
// first) with the sources that drew x. Those reverse entries are counted
// and scattered by workers that each own a range of destination rows and
// scan all drawn edges in node order, so there are no atomics, and every
// row receives its sources in ascending order whatever the number of
// workers; the merge then needs no sort.
func buildCSR(n int64, off []int64, tgt []int32, bar *progress.Bar) (*graph.CSR, error) {
	// Sort each node's targets; self-loop marks (-1) come first.
	valid := func(u int64) []int32 {
		t := tgt[off[u]:off[u+1]]
		i, _ := slices.BinarySearch(t, 0)
		return t[i:]
	}
	forChunks(n, bar, func(lo, hi int64) {
		for u := lo; u < hi; u++ {
			slices.Sort(tgt[off[u]:off[u+1]])
		}
	})

	parts := max(1, min(runtime.GOMAXPROCS(0), maxScanParts, int(n)))
	byNodes := func(i int) int64 { return n * int64(i) / int64(parts) }

	// Row lengths: own targets plus the number of times x was drawn.
	indptr := make([]int64, n+1)
	forRanges(parts, byNodes, func(lo, hi int64) {
		for _, v := range tgt {
			if int64(v) >= lo && int64(v) < hi {
				indptr[v+1]++
			}
		}
	})
	bar.Add(n)
	for u := range n {
		indptr[u+1] += indptr[u] + int64(len(valid(u)))
	}
	if indptr[n] > math.MaxInt64/4 {
		return nil, fmt.Errorf("gen: %d stored edges, too many", indptr[n])
	}
	indices := make([]int32, indptr[n])

	// Scatter reverse entries to the front of each row; cursor[x] ends as
	// the count of them. Parts are balanced by stored entries.
	cursor := slices.Clone(indptr[:n])
	byEdges := func(i int) int64 {
		if i == parts {
			return n
		}
		x, _ := slices.BinarySearch(indptr, indptr[n]*int64(i)/int64(parts))
		return min(int64(x), n)
	}
	forRanges(parts, byEdges, func(lo, hi int64) {
		for u := range n {
			for _, v := range tgt[off[u]:off[u+1]] {
				if int64(v) >= lo && int64(v) < hi {
					indices[cursor[v]] = int32(u)
					cursor[v]++
				}
			}
		}
	})
	bar.Add(n)

	// Merge own targets into each row from the back, then drop
	// duplicates; cursor[x] becomes the final row length.
	forChunks(n, bar, func(lo, hi int64) {
		for x := lo; x < hi; x++ {
			row := indices[indptr[x]:indptr[x+1]]
			own := valid(x)
			i, j := cursor[x]-indptr[x]-1, int64(len(own))-1
			for k := int64(len(row)) - 1; j >= 0; k-- {
				if i >= 0 && row[i] > own[j] {
					row[k] = row[i]
					i--
				} else {
					row[k] = own[j]
					j--
				}
			}
			cursor[x] = int64(len(slices.Compact(row)))
		}
	})

	// Close the gaps left by duplicates. Rows only move left, so one
	// forward pass is safe; indptr[u+1] is read before it is rewritten.
	var w int64
	for u := range n {
		start, k := indptr[u], cursor[u]
		if w != start {
			copy(indices[w:w+k], indices[start:start+k])
		}
		indptr[u] = w
		w += k
	}
	indptr[n] = w
	return &graph.CSR{NumRows: n, NumCols: n, Indptr: indptr, Indices: indices[:w:w]}, nil
}
