package partition

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// wgraph is the graph the multilevel partitioner works on: undirected (both
// directions of every edge stored), no self-loops, integer vertex weights
// (ncon per vertex) and edge weights.
type wgraph struct {
	n    int
	ncon int
	xadj []int64
	adj  []int32
	ew   []int32 // edge weights aligned with adj; nil means every edge weighs 1
	vw   []int32 // vertex weights, n*ncon row-major
	tvw  []int64 // total vertex weight of each constraint
}

func (g *wgraph) nedges() int64 { return g.xadj[g.n] }

// ewt returns the weight of edge slot e.
func (g *wgraph) ewt(e int64) int32 {
	if g.ew == nil {
		return 1
	}
	return g.ew[e]
}

// setTotals fills tvw from vw.
func (g *wgraph) setTotals() {
	g.tvw = make([]int64, g.ncon)
	for i, w := range g.vw {
		g.tvw[i%g.ncon] += int64(w)
	}
}

// workers is how many goroutines parallel passes use. Results never depend
// on it: every parallel pass writes each output element from exactly one
// deterministic computation.
func workers() int { return max(1, runtime.GOMAXPROCS(0)) }

// parallelFor runs fn over [0, n) split into chunks of at least minChunk
// items, handed out dynamically to workers(); fn must only write outputs
// owned by its indices.
func parallelFor(n int, minChunk int, fn func(lo, hi int)) {
	w := workers()
	if w == 1 || n <= minChunk {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	chunk := max(minChunk, n/(8*w)+1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for {
				lo := int(next.Add(int64(chunk))) - chunk
				if lo >= n {
					return
				}
				fn(lo, min(lo+chunk, n))
			}
		})
	}
	wg.Wait()
}
