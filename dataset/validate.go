package dataset

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/strata-gnn/strata/graph"
)

// Validate checks an in-memory dataset: counts consistent, indptr starting
// at 0, non-decreasing and ending at the edge count, every index in
// [0, NumNodes), weights and features finite, labels in [-1, NumClasses),
// split IDs in range and strictly ascending, and for undirected datasets
// that every node's in-degree equals its out-degree (a cheap necessary
// condition for symmetry). Errors are *FormatError whose Path is the array
// name and Off the byte offset of the bad element in that array's file.
func Validate(d *Dataset) error {
	return validate(d, func(name string) string { return name })
}

// validate runs the checks, naming arrays with loc(name).
func validate(d *Dataset, loc func(string) string) error {
	if d == nil || d.Graph == nil {
		return formatErr("dataset", -1, "no graph")
	}
	g := d.Graph
	n := g.NumRows
	if n < 0 || n > MaxNodes {
		return formatErr(loc(ArrIndptr), -1, "node count %d out of range [0, %d]", n, int64(MaxNodes))
	}
	if g.NumCols != n {
		return formatErr(loc(ArrIndptr), -1, "graph has %d rows but %d columns; a dataset graph must be square", n, g.NumCols)
	}
	if int64(len(g.Indptr)) != n+1 {
		return formatErr(loc(ArrIndptr), -1, "indptr has %d entries, want num_nodes+1 = %d", len(g.Indptr), n+1)
	}
	e := int64(len(g.Indices))
	if err := checkIndptr(loc(ArrIndptr), g.Indptr, e); err != nil {
		return err
	}
	if err := checkIDs(loc(ArrIndices), g.Indices, n); err != nil {
		return err
	}
	if g.Weights != nil {
		if int64(len(g.Weights)) != e {
			return formatErr(loc(ArrWeights), -1, "weights has %d entries, want one per edge (%d)", len(g.Weights), e)
		}
		if err := checkFinite(loc(ArrWeights), g.Weights); err != nil {
			return err
		}
	}
	if d.FeatDim < 0 {
		return formatErr(loc(ArrFeatures), -1, "negative feat dim %d", d.FeatDim)
	}
	if (d.FeatDim > 0) != (d.Features != nil) {
		return formatErr(loc(ArrFeatures), -1, "feat dim %d but features present=%v", d.FeatDim, d.Features != nil)
	}
	if d.Features != nil {
		if n > 0 && int64(d.FeatDim) > math.MaxInt64/8/n {
			return formatErr(loc(ArrFeatures), -1, "feat dim %d too large", d.FeatDim)
		}
		if int64(len(d.Features)) != n*int64(d.FeatDim) {
			return formatErr(loc(ArrFeatures), -1, "features has %d values, want %d x %d", len(d.Features), n, d.FeatDim)
		}
		if err := checkFinite(loc(ArrFeatures), d.Features); err != nil {
			return err
		}
	}
	if d.NumClasses < 0 || int64(d.NumClasses) > math.MaxInt32 {
		return formatErr(loc(ArrLabels), -1, "num classes %d out of range", d.NumClasses)
	}
	if (d.NumClasses > 0) != (d.Labels != nil) {
		return formatErr(loc(ArrLabels), -1, "num classes %d but labels present=%v", d.NumClasses, d.Labels != nil)
	}
	if d.Labels != nil {
		if int64(len(d.Labels)) != n {
			return formatErr(loc(ArrLabels), -1, "labels has %d entries, want %d", len(d.Labels), n)
		}
		labels, classes := d.Labels, int32(d.NumClasses)
		if i := firstBad(len(labels), func(lo, hi int) int {
			for i, l := range labels[lo:hi] {
				if l < -1 || l >= classes {
					return lo + i
				}
			}
			return -1
		}); i >= 0 {
			return formatErr(loc(ArrLabels), int64(i)*4, "label %d of node %d out of range [-1, %d)", labels[i], i, d.NumClasses)
		}
	}
	for _, s := range []struct {
		name string
		ids  []int32
	}{{ArrTrain, d.Train}, {ArrVal, d.Val}, {ArrTest, d.Test}} {
		if s.ids == nil {
			continue
		}
		if d.Labels == nil {
			return formatErr(loc(s.name), -1, "split present without labels")
		}
		if err := checkSplit(loc(s.name), s.ids, n); err != nil {
			return err
		}
	}
	if !d.Directed {
		if err := checkDegreeSymmetry(loc(ArrIndices), g); err != nil {
			return err
		}
	}
	return nil
}

func checkIndptr(path string, p []int64, e int64) error {
	if len(p) == 0 {
		return formatErr(path, -1, "empty indptr")
	}
	if p[0] != 0 {
		return formatErr(path, 0, "indptr[0] = %d, want 0", p[0])
	}
	if i := firstBad(len(p)-1, func(lo, hi int) int {
		for i := lo + 1; i <= hi; i++ {
			if p[i] < p[i-1] {
				return i
			}
		}
		return -1
	}); i >= 0 {
		return formatErr(path, int64(i)*8, "indptr decreases at row %d (%d < %d)", i-1, p[i], p[i-1])
	}
	if last := p[len(p)-1]; last != e {
		return formatErr(path, int64(len(p)-1)*8, "indptr ends at %d, want the edge count %d", last, e)
	}
	return nil
}

// checkIDs reports the first ID outside [0, n).
func checkIDs(path string, ids []graph.NodeID, n int64) error {
	// An unsigned compare catches negatives too.
	un := uint32(min(n, math.MaxUint32))
	i := firstBad(len(ids), func(lo, hi int) int {
		for i, v := range ids[lo:hi] {
			if uint32(v) >= un {
				return lo + i
			}
		}
		return -1
	})
	if i >= 0 {
		return formatErr(path, int64(i)*4, "node ID %d at entry %d out of range [0, %d)", ids[i], i, n)
	}
	return nil
}

// parallelMin is the slice length from which firstBad splits the work.
const parallelMin = 1 << 20

// forChunks calls fn on one contiguous chunk of [0, n) per CPU, chunks of
// at least minChunk items (one call when n is smaller), and waits.
func forChunks(n, minChunk int, fn func(lo, hi int)) {
	parts := max(min(runtime.GOMAXPROCS(0), n/max(minChunk, 1)), 1)
	if parts == 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}

// firstBad runs scan over [0, n) split into one part per CPU and returns
// the smallest index any part reports (-1 if none), so the answer is the
// same as a sequential scan's whatever the scheduling.
func firstBad(n int, scan func(lo, hi int) int) int {
	parts := runtime.GOMAXPROCS(0)
	if n < parallelMin || parts < 2 {
		return scan(0, n)
	}
	res := make([]int, parts)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Go(func() { res[p] = scan(lo, hi) })
	}
	wg.Wait()
	for _, r := range res {
		if r >= 0 {
			return r
		}
	}
	return -1
}

func checkFinite(path string, x []float32) error {
	// A float32 is Inf or NaN iff its exponent bits are all ones; then
	// (bits&exp)+1<<23 sets bit 31, which no finite value does. OR-reducing
	// that over a block is branch-free and far faster than float compares.
	const exp = 0x7f800000
	bits := fromBytes[uint32](asBytes(x))
	i := firstBad(len(bits), func(lo, hi int) int {
		for b0 := lo; b0 < hi; b0 += 4096 {
			blk := bits[b0:min(b0+4096, hi)]
			var flag uint32
			for _, b := range blk {
				flag |= b&exp + 1<<23
			}
			if flag>>31 == 0 {
				continue
			}
			for i, b := range blk {
				if b&exp == exp {
					return b0 + i
				}
			}
		}
		return -1
	})
	if i >= 0 {
		return formatErr(path, int64(i)*4, "non-finite value %v at entry %d", x[i], i)
	}
	return nil
}

func checkSplit(path string, ids []int32, n int64) error {
	for i, v := range ids {
		if v < 0 || int64(v) >= n {
			return formatErr(path, int64(i)*4, "node ID %d at entry %d out of range [0, %d)", v, i, n)
		}
		if i > 0 && v <= ids[i-1] {
			return formatErr(path, int64(i)*4, "split not strictly ascending at entry %d (%d after %d)", i, v, ids[i-1])
		}
	}
	return nil
}

// checkDegreeSymmetry checks in-degree == out-degree for every node, which
// every symmetric graph satisfies. IDs must already be in range.
func checkDegreeSymmetry(path string, g *graph.CSR) error {
	procs := runtime.GOMAXPROCS(0)
	if int64(len(g.Indices)) < math.MaxInt32 {
		return compareDegrees(path, g, inDegrees[int32](g.Indices, g.NumRows, procs))
	}
	return compareDegrees(path, g, inDegrees[int64](g.Indices, g.NumRows, procs))
}

// compareDegrees reports the lowest node whose out-degree in g is not its
// in-degree in, comparing node ranges in parallel.
func compareDegrees[T int32 | int64](path string, g *graph.CSR, in []T) error {
	v := firstBad(int(g.NumRows), func(lo, hi int) int {
		for v := lo; v < hi; v++ {
			if g.Indptr[v+1]-g.Indptr[v] != int64(in[v]) {
				return v
			}
		}
		return -1
	})
	if v >= 0 {
		return formatErr(path, -1, "dataset is marked undirected but node %d has out-degree %d and in-degree %d", v, g.Indptr[v+1]-g.Indptr[v], in[v])
	}
	return nil
}

// Counting in-degrees: one increment per edge at a random place of an
// array of a count per node (444 MB for papers100M) misses the caches at
// almost every edge. inDegrees sorts the edges' targets into blocks of
// degreeBlock nodes first (a counting sort of their high bits, keeping the
// low 16), so that each block's increments stay within 256 KiB.
const (
	degreeBlockBits = 16
	degreeBlock     = 1 << degreeBlockBits
)

// degreeRound is how many edges are bucketed at a time (2 bytes each):
// 512 MiB of scratch at most. A variable for the tests.
var degreeRound = 1 << 28

// degreeDirectMax is the most nodes whose counts inDegrees keeps whole
// per goroutine (8 MiB of int32 each: in cache, where bucketing first
// costs more than it saves). A variable for the tests.
var degreeDirectMax int64 = 1 << 21

// inDegrees counts how often each of the n nodes appears in ids (all in
// [0, n); T must hold len(ids)). Up to degreeDirectMax nodes, chunks of
// the edges are counted into arrays of their own, then summed. Beyond,
// chunks of each round of edges are bucketed by block on up to procs
// goroutines, then the blocks are counted concurrently, each by one
// goroutine. Integer counts either way: the same for any procs.
func inDegrees[T int32 | int64](ids []graph.NodeID, n int64, procs int) []T {
	if n <= degreeDirectMax {
		// As many arrays as stay in a shared cache of 32 MiB together.
		parts := max(min(procs, len(ids)/parallelMin, int((32<<20)/(4*max(n, 1)))), 1)
		counts := make([][]T, parts)
		forParts(parts, func(p int) {
			c := make([]T, n)
			for _, v := range ids[len(ids)*p/parts : len(ids)*(p+1)/parts] {
				c[v]++
			}
			counts[p] = c
		})
		forChunks(int(n), parallelMin/16, func(lo, hi int) {
			for _, c := range counts[1:] {
				for v := lo; v < hi; v++ {
					counts[0][v] += c[v]
				}
			}
		})
		return counts[0]
	}
	counts := make([]T, n)
	blocks := int((n + degreeBlock - 1) >> degreeBlockBits)
	scratch := make([]uint16, min(len(ids), degreeRound))
	starts := make([]int, blocks+1)
	for at := 0; at < len(ids); at += degreeRound {
		round := ids[at:min(at+degreeRound, len(ids))]
		parts := max(min(procs, len(round)/parallelMin), 1)
		chunk := func(p int) []graph.NodeID { return round[len(round)*p/parts : len(round)*(p+1)/parts] }
		// Per chunk, its edges per block; then where each (block,
		// chunk) run starts in scratch, block-major.
		offs := make([][]int, parts)
		forParts(parts, func(p int) {
			h := make([]int, blocks)
			for _, v := range chunk(p) {
				h[v>>degreeBlockBits]++
			}
			offs[p] = h
		})
		pos := 0
		for b := range blocks {
			starts[b] = pos
			for p := range parts {
				c := offs[p][b]
				offs[p][b] = pos
				pos += c
			}
		}
		starts[blocks] = pos
		forParts(parts, func(p int) {
			off := offs[p]
			for _, v := range chunk(p) {
				b := v >> degreeBlockBits
				scratch[off[b]] = uint16(v)
				off[b]++
			}
		})
		var next atomic.Int64
		forParts(min(procs, blocks), func(int) {
			for b := int(next.Add(1) - 1); b < blocks; b = int(next.Add(1) - 1) {
				c := counts[b<<degreeBlockBits : min(int64(b+1)<<degreeBlockBits, n)]
				for _, x := range scratch[starts[b]:starts[b+1]] {
					c[x]++
				}
			}
		})
	}
	return counts
}

// forParts runs fn(0), ..., fn(parts-1) on a goroutine each (inline for
// one) and waits.
func forParts(parts int, fn func(p int)) {
	if parts <= 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { fn(p) })
	}
	wg.Wait()
}
