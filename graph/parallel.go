package graph

import (
	"runtime"
	"sort"
	"sync"
)

// Work is split into contiguous chunks processed by one goroutine each.
// Chunk boundaries may depend on GOMAXPROCS, but every operation here is
// written so that its output does not: counting sorts place items by
// (key, original position), filters write at prefix-sum offsets.

const (
	// minChunk is the least work (edges or items) worth a goroutine.
	minChunk = 1 << 15
	// histBudget bounds the bytes of per-chunk histograms in counting sorts.
	histBudget = 1 << 29
)

func parallelism() int { return max(1, runtime.GOMAXPROCS(0)) }

// evenBounds splits [0, n) into at most parts near-equal chunks of at least
// minWork items each (one chunk when n is small). len(result) >= 2.
func evenBounds(n int64, parts int, minWork int64) []int64 {
	k := int64(parts)
	if minWork > 0 {
		k = min(k, n/minWork)
	}
	k = max(k, 1)
	b := make([]int64, k+1)
	for i := int64(0); i <= k; i++ {
		b[i] = n / k * i
		b[i] += min(i, n%k) // spread the remainder
	}
	return b
}

// rowBounds splits rows [0, len(indptr)-1) into at most parts chunks of
// about equal cost, where a row costs 1 plus its degree. indptr must be
// non-decreasing (validated).
func rowBounds(indptr []int64, parts int, minWork int64) []int64 {
	rows := int64(len(indptr) - 1)
	total := indptr[rows] + rows
	k := int64(parts)
	if minWork > 0 {
		k = min(k, total/minWork)
	}
	k = max(k, 1)
	b := make([]int64, k+1)
	b[k] = rows
	for i := int64(1); i < k; i++ {
		target := total / k * i
		b[i] = int64(sort.Search(int(rows), func(r int) bool { return indptr[r]+int64(r) >= target }))
		b[i] = max(b[i], b[i-1])
	}
	return b
}

// run calls fn(part, bounds[part], bounds[part+1]) for every chunk, each on
// its own goroutine (inline when there is one chunk), and waits.
func run(bounds []int64, fn func(part int, lo, hi int64)) {
	parts := len(bounds) - 1
	if parts == 1 {
		fn(0, bounds[0], bounds[1])
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		wg.Go(func() { fn(p, bounds[p], bounds[p+1]) })
	}
	wg.Wait()
}

// histParts is how many chunks a counting sort over numKeys keys may use:
// one histogram of numKeys int64 per chunk, within histBudget.
func histParts(items, numKeys int64) int {
	p := int64(parallelism())
	p = min(p, histBudget/max(8*numKeys, 1))
	p = min(p, items/minChunk)
	return int(max(p, 1))
}

// histToOffsets turns per-chunk key counts hist[p*numKeys+k] into start
// offsets (in place) and returns the indptr of the grouped output: all
// items of key k, chunk 0's first, then chunk 1's, and so on.
func histToOffsets(hist []int64, parts int, numKeys int64) []int64 {
	indptr := make([]int64, numKeys+1)
	kb := evenBounds(numKeys, parallelism(), minChunk)
	run(kb, func(_ int, lo, hi int64) {
		for k := lo; k < hi; k++ {
			var s int64
			for p := 0; p < parts; p++ {
				s += hist[int64(p)*numKeys+k]
			}
			indptr[k+1] = s
		}
	})
	for k := int64(0); k < numKeys; k++ {
		indptr[k+1] += indptr[k]
	}
	run(kb, func(_ int, lo, hi int64) {
		for k := lo; k < hi; k++ {
			s := indptr[k]
			for p := 0; p < parts; p++ {
				i := int64(p)*numKeys + k
				c := hist[i]
				hist[i] = s
				s += c
			}
		}
	})
	return indptr
}

// prefixSum turns per-row counts (len n+1, counts[n] == 0) into an indptr,
// in place: counts[0] = 0, counts[i+1] = counts[i] + old counts[i].
func prefixSum(counts []int64) {
	var s int64
	for i := range counts {
		c := counts[i]
		counts[i] = s
		s += c
	}
}
