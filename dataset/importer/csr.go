package importer

import (
	"runtime"
	"slices"
	"sync"

	"github.com/strata-gnn/strata/graph"
)

// buildCSR turns an edge list on nodes [0, n) into a CSR whose rows are
// sorted and free of duplicate entries (multi-edges are coalesced, as PyG's
// coalesce does). With symmetrize every edge is stored in both directions.
// IDs must already be checked to lie in [0, n). The result depends only on
// the input, not on the number of goroutines.
func buildCSR(n int64, src, dst []int32, symmetrize bool) *graph.CSR {
	indptr := make([]int64, n+1)
	for _, s := range src {
		indptr[s+1]++
	}
	if symmetrize {
		for _, d := range dst {
			indptr[d+1]++
		}
	}
	for i := int64(0); i < n; i++ {
		indptr[i+1] += indptr[i]
	}
	indices := make([]int32, indptr[n])
	pos := make([]int64, n)
	copy(pos, indptr[:n])
	for i, s := range src {
		d := dst[i]
		indices[pos[s]] = d
		pos[s]++
		if symmetrize {
			indices[pos[d]] = s
			pos[d]++
		}
	}
	pos = nil

	// Sort and dedupe each row in place; rows are split into contiguous
	// ranges of about equal edge counts, one per worker.
	newLen := make([]int64, n)
	byRowRanges(indptr, n, func(a, b int64) {
		for v := a; v < b; v++ {
			row := indices[indptr[v]:indptr[v+1]]
			slices.Sort(row)
			newLen[v] = int64(len(slices.Compact(row)))
		}
	})

	// Compact the rows towards the front.
	w := int64(0)
	for v := int64(0); v < n; v++ {
		start := indptr[v]
		copy(indices[w:], indices[start:start+newLen[v]])
		indptr[v] = w
		w += newLen[v]
	}
	indptr[n] = w
	return &graph.CSR{NumRows: n, NumCols: n, Indptr: indptr, Indices: slices.Clip(indices[:w])}
}

// buildWeightedCSR is buildCSR for an edge list with a weight per edge:
// with symmetrize the reverse edge gets the same weight, and duplicate
// entries of a row are coalesced into one whose weight is their sum,
// added in float64 in input order (so the result is deterministic).
func buildWeightedCSR(n int64, src, dst []int32, w []float32, symmetrize bool) *graph.CSR {
	indptr := make([]int64, n+1)
	for _, s := range src {
		indptr[s+1]++
	}
	if symmetrize {
		for _, d := range dst {
			indptr[d+1]++
		}
	}
	for i := int64(0); i < n; i++ {
		indptr[i+1] += indptr[i]
	}
	indices := make([]int32, indptr[n])
	weights := make([]float32, indptr[n])
	pos := make([]int64, n)
	copy(pos, indptr[:n])
	for i, s := range src {
		d := dst[i]
		indices[pos[s]], weights[pos[s]] = d, w[i]
		pos[s]++
		if symmetrize {
			indices[pos[d]], weights[pos[d]] = s, w[i]
			pos[d]++
		}
	}
	pos = nil

	type entry struct {
		v int32
		w float32
	}
	newLen := make([]int64, n)
	byRowRanges(indptr, n, func(a, b int64) {
		var row []entry
		for v := a; v < b; v++ {
			base := indptr[v]
			row = row[:0]
			for e := base; e < indptr[v+1]; e++ {
				row = append(row, entry{indices[e], weights[e]})
			}
			slices.SortStableFunc(row, func(x, y entry) int { return int(x.v) - int(y.v) })
			m := int64(0)
			for i := 0; i < len(row); {
				j := i
				sum := 0.0
				for ; j < len(row) && row[j].v == row[i].v; j++ {
					sum += float64(row[j].w)
				}
				indices[base+m], weights[base+m] = row[i].v, float32(sum)
				m++
				i = j
			}
			newLen[v] = m
		}
	})

	out := int64(0)
	for v := int64(0); v < n; v++ {
		start := indptr[v]
		copy(indices[out:], indices[start:start+newLen[v]])
		copy(weights[out:], weights[start:start+newLen[v]])
		indptr[v] = out
		out += newLen[v]
	}
	indptr[n] = out
	return &graph.CSR{NumRows: n, NumCols: n, Indptr: indptr, Indices: slices.Clip(indices[:out]), Weights: slices.Clip(weights[:out])}
}

// byRowRanges runs body over the rows [0, n) split into contiguous ranges
// of about equal edge counts (indptr's), one goroutine per range, up to
// GOMAXPROCS of them, and waits.
func byRowRanges(indptr []int64, n int64, body func(a, b int64)) {
	workers := int64(max(1, runtime.GOMAXPROCS(0)))
	total := indptr[n]
	var wg sync.WaitGroup
	lo := int64(0)
	for w := int64(1); w <= workers && lo < n; w++ {
		target := total * w / workers
		hi := lo
		for hi < n && (indptr[hi] < target || hi == lo) {
			hi++
		}
		if w == workers {
			hi = n
		}
		a, b := lo, hi
		wg.Go(func() { body(a, b) })
		lo = hi
	}
	wg.Wait()
}
