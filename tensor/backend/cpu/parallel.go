package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Grain sizes: the least work worth a goroutine, in elements touched.
const (
	grainElem = 1 << 14
)

// parFor calls fn on disjoint ranges covering [0, n), in parallel when n is
// at least 2*grain. Which goroutine runs which range varies, so fn must
// write only outputs owned by its range; it must not accumulate into shared
// state.
func parFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	workers := runtime.GOMAXPROCS(0)
	chunks := min((n+grain-1)/grain, 4*workers)
	if chunks <= 1 || workers == 1 {
		fn(0, n)
		return
	}
	size := (n + chunks - 1) / chunks
	chunks = (n + size - 1) / size
	var next atomic.Int64
	var wg sync.WaitGroup
	run := func() {
		defer wg.Done()
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			fn(c*size, min((c+1)*size, n))
		}
	}
	g := min(workers, chunks)
	wg.Add(g)
	for range g - 1 {
		go run()
	}
	run()
	wg.Wait()
}

// rowGrain returns a grain in rows so that a chunk touches about grainElem
// elements when each row costs width elements.
func rowGrain(width int) int {
	return max(1, grainElem/max(width, 1))
}

// chunkSums splits [0, n) into fixed chunks of size chunk (independent of
// the number of goroutines), computes fn on each in parallel and returns the
// partial results in chunk order, so combining them is deterministic.
func chunkSums(n, chunk int, fn func(lo, hi int) float64) []float64 {
	nc := (n + chunk - 1) / chunk
	out := make([]float64, nc)
	parFor(nc, max(1, grainElem/chunk), func(lo, hi int) {
		for c := lo; c < hi; c++ {
			out[c] = fn(c*chunk, min((c+1)*chunk, n))
		}
	})
	return out
}
