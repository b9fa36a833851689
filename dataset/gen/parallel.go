package gen

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/rng"
)

// chunkNodes is the fixed unit of parallel work. Results never depend on it
// (every random draw is keyed by node ID, not by chunk or goroutine), but it
// is a constant anyway so that no schedule can leak into the output.
const chunkNodes = 1 << 14

// forChunks calls fn(lo, hi) for consecutive ranges covering [0, n), on up
// to GOMAXPROCS goroutines, and adds each finished range to bar. fn must
// only write outputs owned by its range, or use integer atomics whose final
// values do not depend on order.
func forChunks(n int64, bar *progress.Bar, fn func(lo, hi int64)) {
	chunks := (n + chunkNodes - 1) / chunkNodes
	workers := int64(min(runtime.GOMAXPROCS(0), 64))
	workers = min(workers, chunks)
	if workers <= 1 {
		for lo := int64(0); lo < n; lo += chunkNodes {
			hi := min(lo+chunkNodes, n)
			fn(lo, hi)
			bar.Add(hi - lo)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				c := next.Add(1) - 1
				if c >= chunks {
					return
				}
				lo := c * chunkNodes
				hi := min(lo+chunkNodes, n)
				fn(lo, hi)
				bar.Add(hi - lo)
			}
		})
	}
	wg.Wait()
}

// Stream tags: each kind of draw has its own key derived from the seed, so
// changing one part of the generator never shifts another's randomness.
const (
	tagWeight uint64 = iota + 1
	tagClass
	tagEdges
	tagCentroid
	tagFeature
	tagSplit
)

// key returns the stream key of (seed, tag, id); draws are then
// rng.Hash(key, 0), rng.Hash(key, 1), ...
func key(seed, tag, id uint64) uint64 {
	return rng.Hash(rng.Hash(seed+tag*0xD1B54A32D192ED03, tag), id)
}

// unit maps 64 random bits to a float64 in [0, 1) with 53 bits.
func unit(h uint64) float64 { return float64(h>>11) * (1.0 / (1 << 53)) }

// openUnit maps 64 random bits to a float64 in (0, 1].
func openUnit(h uint64) float64 { return float64(h>>11+1) * (1.0 / (1 << 53)) }
