package link

import (
	"runtime"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/rng"
)

// The split's passes over every edge run on all cores (products' 124M
// stored edges took 28 s on one): each is cut into chunks whose results
// are put together in chunk order, so the split is the same whatever the
// number of goroutines (TestSplitParallelEqualsSequential).

// splitChunk is the number of edges (or items) below which a pass runs
// on one goroutine, and the smallest chunk otherwise (variables for the
// tests, which cut small graphs into many chunks).
var (
	splitChunk = 1 << 16
	negRound   = 1 << 14
)

// forRange runs f over [0, n) in chunks of at least grain items on up to
// GOMAXPROCS goroutines.
func forRange(n, grain int, f func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), n/max(grain, 1))
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { f(n*p/parts, n*(p+1)/parts) })
	}
	wg.Wait()
}

// rowChunks cuts g's rows into runs of about equal edge counts (at
// least splitChunk edges each, at most 4 per core): bounds[p] to
// bounds[p+1] is run p.
func rowChunks(g *graph.CSR) []int32 {
	n, m := g.NumRows, g.NumEdges()
	parts := int(min(int64(4*runtime.GOMAXPROCS(0)), m/int64(max(splitChunk, 1))))
	parts = max(parts, 1)
	bounds := make([]int32, parts+1)
	bounds[parts] = int32(n)
	for p := 1; p < parts; p++ {
		r, _ := slices.BinarySearch(g.Indptr[:n+1], m*int64(p)/int64(parts))
		bounds[p] = max(int32(r), bounds[p-1])
	}
	return bounds
}

// forRows runs f over g's row runs (rowChunks) on up to GOMAXPROCS
// goroutines.
func forRows(g *graph.CSR, f func(lo, hi int32)) {
	b := rowChunks(g)
	forRange(len(b)-1, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			f(b[p], b[p+1])
		}
	})
}

// collectLinks lists g's links (rows sorted) in row order, each as
// u<<32 | v (uint32s): every entry u->v once, duplicates skipped, an
// undirected graph's pairs u < v only; and its self-loops, in row order.
func collectLinks(g *graph.CSR, undirected bool) (links []uint64, loops []int32) {
	b := rowChunks(g)
	parts := len(b) - 1
	nl, nself := make([]int, parts+1), make([]int, parts+1)
	// each calls f(u, v) for run p's links and f(u, u) for its loops.
	each := func(p int, link func(u, v int32), loop func(u int32)) {
		for u := b[p]; u < b[p+1]; u++ {
			row := g.Neighbors(u)
			for i, v := range row {
				switch {
				case i > 0 && v == row[i-1]: // a duplicate entry
				case v == u:
					loop(u)
				case undirected && v < u: // counted from v's row
				default:
					link(u, v)
				}
			}
		}
	}
	forRange(parts, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			each(p, func(int32, int32) { nl[p+1]++ }, func(int32) { nself[p+1]++ })
		}
	})
	for p := range parts {
		nl[p+1] += nl[p]
		nself[p+1] += nself[p]
	}
	links, loops = make([]uint64, nl[parts]), make([]int32, nself[parts])
	forRange(parts, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			i, j := nl[p], nself[p]
			each(p, func(u, v int32) {
				links[i] = uint64(uint32(u))<<32 | uint64(uint32(v))
				i++
			}, func(u int32) {
				loops[j] = u
				j++
			})
		}
	})
	return links, loops
}

// shuffle permutes links by Fisher-Yates from the stream of key, as
// rng.Stream's Below draws it: position i (from the last down) swaps
// with draw l-1-i below i+1. The swaps are sequential, but one packed
// array takes one cache miss a swap, not two.
func shuffle(links []uint64, key uint64) {
	l := len(links)
	for i := l - 1; i > 0; i-- {
		j := rng.Below(rng.Hash(key, uint64(l-1-i)), uint64(i+1))
		links[i], links[j] = links[j], links[i]
	}
}

// unpack is packed links (collectLinks) as Edges.
func unpack(links []uint64) Edges {
	e := Edges{Src: make([]int32, len(links)), Dst: make([]int32, len(links))}
	forRange(len(links), splitChunk, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			e.Src[i], e.Dst[i] = int32(uint32(links[i]>>32)), int32(uint32(links[i]))
		}
	})
	return e
}
