package sample

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelFor covers [0, n) with chunks of grain items handed out
// dynamically to up to workers goroutines. newWorker is called once per
// goroutine to build its loop body (with its own scratch). Callers write
// results at positions fixed beforehand (prefix sums), so the output does
// not depend on which goroutine ran which chunk.
func parallelFor(n, grain, workers int, newWorker func() func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunks := (n + grain - 1) / grain
	workers = min(workers, chunks)
	if workers <= 1 {
		newWorker()(0, n)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			body := newWorker()
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo := c * grain
				body(lo, min(lo+grain, n))
			}
		})
	}
	wg.Wait()
}

func resolveWorkers(w int) int {
	if w > 0 {
		return w
	}
	return max(1, runtime.GOMAXPROCS(0))
}
