package link

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

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
// with draw l-1-i below i+1 (swapTarget). Large arrays are shuffled in
// parallel rounds (shuffleRounds), to the same permutation.
func shuffle(links []uint64, key uint64) {
	l := len(links)
	if l < shuffleMin || l > math.MaxInt32 || runtime.GOMAXPROCS(0) == 1 {
		for i := l - 1; i > 0; i-- {
			j := swapTarget(key, l, i)
			links[i], links[j] = links[j], links[i]
		}
		return
	}
	shuffleRounds(links, key)
}

// swapTarget is the position that Fisher-Yates swaps with position i of
// l: draw l-1-i of key's stream, below i+1.
func swapTarget(key uint64, l, i int) int {
	return int(rng.Below(rng.Hash(key, uint64(l-1-i)), uint64(i+1)))
}

// shuffleMin is the length from which shuffle runs in rounds, and
// shuffleWindow the least number of swaps a round tries (variables for
// the tests).
var (
	shuffleMin    = 1 << 20
	shuffleWindow = 1 << 16
)

// shuffleRounds is Fisher-Yates by deterministic reservations (Shun,
// Gu, Blelloch, Fineman, Gibbons: "Sequential random permutation, list
// contraction and tree contraction are highly parallel", SODA 2015).
// Swap i (positions i and j(i) <= i) must follow the earlier swaps (the
// larger i) that touch either position, and no other. A round takes the
// earliest swaps not yet done (a window, in order); each reserves its two
// positions with the largest swap index touching them; a swap that holds
// both does them, the others stay for the next round. Swaps done in one
// round touch distinct positions, and a position's swaps run in their
// sequential order, so the result is the sequential permutation whatever
// the goroutines. Most swaps touch positions no earlier one does, so
// few rounds retry much.
func shuffleRounds(links []uint64, key uint64) {
	l := len(links)
	res := make([]int32, l) // the reservation of each position: a swap index, or -1
	for i := range res {
		res[i] = -1
	}
	reserve := func(p int, i int32) {
		for {
			old := atomic.LoadInt32(&res[p])
			if old >= i || atomic.CompareAndSwapInt32(&res[p], old, i) {
				return
			}
		}
	}
	win := max(l/50, shuffleWindow)
	window := make([]int32, 0, win)
	done := make([]bool, win)
	next := l - 1 // the earliest swap not in the window yet
	for next > 0 || len(window) > 0 {
		for len(window) < win && next > 0 {
			window = append(window, int32(next))
			next--
		}
		w := window
		forRange(len(w), 1024, func(lo, hi int) {
			for k := lo; k < hi; k++ {
				i := w[k]
				reserve(int(i), i)
				reserve(swapTarget(key, l, int(i)), i)
			}
		})
		forRange(len(w), 1024, func(lo, hi int) {
			for k := lo; k < hi; k++ {
				i := int(w[k])
				j := swapTarget(key, l, i)
				done[k] = atomic.LoadInt32(&res[i]) == int32(i) && atomic.LoadInt32(&res[j]) == int32(i)
				if done[k] {
					links[i], links[j] = links[j], links[i]
				}
			}
		})
		forRange(len(w), 1024, func(lo, hi int) {
			for k := lo; k < hi; k++ {
				i := int(w[k])
				atomic.StoreInt32(&res[i], -1)
				atomic.StoreInt32(&res[swapTarget(key, l, i)], -1)
			}
		})
		kept := window[:0]
		for k, i := range w {
			if !done[k] {
				kept = append(kept, i)
			}
		}
		window = kept
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
