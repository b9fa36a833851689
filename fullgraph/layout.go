package fullgraph

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/strata-gnn/strata/graph"
)

// Aggregation is the normalized adjacency a layout holds.
type Aggregation uint8

const (
	// AggGCN: self-loops added to rows that lack one (appended at the end
	// of the row), weights 1/sqrt(indeg(i) * outdeg(j)) counted in the
	// self-loop graph, i.e. D^-1/2 (A+I) D^-1/2 on a symmetric graph (as
	// nn.Block.GCNWeights). GAT runs on this layout's structure (the
	// self-loop graph of nn.Block.WithSelfLoops) and ignores its weights.
	AggGCN Aggregation = iota + 1
	// AggMean: the in-adjacency as is, weights 1/indeg(i) (as
	// nn.Block.MeanWeights).
	AggMean
)

func (a Aggregation) String() string {
	switch a {
	case AggGCN:
		return "gcn"
	case AggMean:
		return "mean"
	}
	return fmt.Sprintf("aggregation(%d)", uint8(a))
}

// SubBlock is the part of a device's rows whose sources lie in one source
// block: a Rows x Cols CSR matrix whose column indices are local to the
// source block (global ID minus the block's first ID), with one weight
// per entry. Within a row the entries keep the order of the full row.
type SubBlock struct {
	Rows, Cols int
	Indptr     []int64
	Indices    []int32
	Weights    []float32
}

// NNZ returns the number of entries.
func (s *SubBlock) NNZ() int { return len(s.Indices) }

// Layout is the 1-D row-block decomposition of a normalized adjacency
// matrix over P devices: device d owns the node IDs [Offsets[d],
// Offsets[d+1]) and holds their rows of the in-adjacency, split by source
// block into P sub-blocks Blocks[d][s] (A_ds). A layer's aggregation on
// device d is then sum over s of A_ds * H_s, where H_s is the embedding
// block of device s.
type Layout struct {
	N       int
	Offsets []int64
	Agg     Aggregation
	Blocks  [][]SubBlock // [destination block][source block]
	// Used[d][s] lists, ascending, the distinct columns of A_ds for
	// s != d: the rows of block s that device d reads (its halo in s), and
	// the only rows of d's gradient contribution to s that can be
	// non-zero. Used[d][d] is nil.
	Used [][][]int32
	// Rows[d] is device d's rows of the whole matrix, unsplit: n_d x N
	// with global column IDs, each row's entries in the order of the full
	// row (GCN's added self-loop last), the order one device sums them in.
	// With one block it is Blocks[0][0].
	Rows []SubBlock
}

// P returns the number of blocks.
func (l *Layout) P() int { return len(l.Offsets) - 1 }

// Range returns block p's node IDs [lo, hi).
func (l *Layout) Range(p int) (lo, hi int) { return int(l.Offsets[p]), int(l.Offsets[p+1]) }

// Size returns the number of nodes of block p.
func (l *Layout) Size(p int) int { return int(l.Offsets[p+1] - l.Offsets[p]) }

// NNZ returns the number of entries of A_ds.
func (l *Layout) NNZ(d, s int) int { return l.Blocks[d][s].NNZ() }

// Edges returns the number of entries of the whole matrix and how many of
// them lie outside the diagonal blocks (their source is on another device).
func (l *Layout) Edges() (total, remote int64) {
	for d := range l.Blocks {
		for s := range l.Blocks[d] {
			n := int64(l.NNZ(d, s))
			total += n
			if s != d {
				remote += n
			}
		}
	}
	return total, remote
}

// LayoutError reports an invalid graph or block layout.
type LayoutError struct{ Msg string }

func (e *LayoutError) Error() string { return "fullgraph: layout: " + e.Msg }

func layoutErr(format string, args ...any) error {
	return &LayoutError{Msg: fmt.Sprintf(format, args...)}
}

// RangeOffsets splits n nodes into p contiguous blocks whose sizes differ
// by at most one.
func RangeOffsets(n, p int) ([]int64, error) {
	if p < 1 || n < p {
		return nil, layoutErr("cannot split %d nodes into %d non-empty blocks", n, p)
	}
	off := make([]int64, p+1)
	for i := 1; i <= p; i++ {
		off[i] = int64(i) * int64(n) / int64(p)
	}
	return off, nil
}

// NewLayout builds the layout of the in-adjacency in (row v lists the
// sources of v's incoming edges; edge weights are ignored) over the
// blocks given by offsets (P+1 increasing values from 0 to the number of
// nodes; every block non-empty), normalized as agg says.
func NewLayout(in *graph.CSR, offsets []int64, agg Aggregation) (*Layout, error) {
	if in == nil {
		return nil, layoutErr("nil graph")
	}
	if in.NumRows != in.NumCols || in.NumRows < 1 || in.NumRows > math.MaxInt32 {
		return nil, layoutErr("graph is %d x %d, want square with 1..%d nodes", in.NumRows, in.NumCols, math.MaxInt32)
	}
	n := int(in.NumRows)
	if len(in.Indptr) != n+1 || in.Indptr[0] != 0 || in.Indptr[n] != int64(len(in.Indices)) {
		return nil, layoutErr("indptr does not describe %d indices", len(in.Indices))
	}
	for i := 0; i < n; i++ {
		if in.Indptr[i+1] < in.Indptr[i] {
			return nil, layoutErr("indptr decreases at row %d", i)
		}
	}
	if agg != AggGCN && agg != AggMean {
		return nil, layoutErr("unknown aggregation %v", agg)
	}
	p := len(offsets) - 1
	if p < 1 || p > maxDevices {
		return nil, layoutErr("%d offsets: want 2..%d", len(offsets), maxDevices+1)
	}
	if offsets[0] != 0 || offsets[p] != int64(n) {
		return nil, layoutErr("offsets run from %d to %d, want 0 to %d", offsets[0], offsets[p], n)
	}
	for i := 0; i < p; i++ {
		if offsets[i+1] <= offsets[i] {
			return nil, layoutErr("block %d is empty or reversed (%d..%d)", i, offsets[i], offsets[i+1])
		}
	}
	owner := make([]int32, n)
	for b := 0; b < p; b++ {
		for v := offsets[b]; v < offsets[b+1]; v++ {
			owner[v] = int32(b)
		}
	}
	for e, j := range in.Indices {
		if j < 0 || int(j) >= n {
			return nil, layoutErr("edge %d has source %d, want [0, %d)", e, j, n)
		}
	}

	// Degrees of the normalized graph: GCN counts the self-loop graph.
	rowLen := func(i int) int64 { return in.Indptr[i+1] - in.Indptr[i] }
	var loop []bool // row i lacks a self-loop (GCN appends one)
	var outdeg []int64
	if agg == AggGCN {
		loop = make([]bool, n)
		outdeg = make([]int64, n)
		for i := 0; i < n; i++ {
			has := false
			for _, j := range in.Indices[in.Indptr[i]:in.Indptr[i+1]] {
				outdeg[j]++
				has = has || int(j) == i
			}
			if !has {
				loop[i] = true
				outdeg[i]++
			}
		}
	}
	weight := func(i int, j int32) float32 {
		if agg == AggMean {
			return float32(1 / float64(max(rowLen(i), 1)))
		}
		deg := rowLen(i)
		if loop[i] {
			deg++
		}
		return float32(1 / math.Sqrt(float64(max(deg, 1))*float64(max(outdeg[j], 1))))
	}

	l := &Layout{N: n, Offsets: append([]int64(nil), offsets...), Agg: agg, Blocks: make([][]SubBlock, p),
		Used: make([][][]int32, p), Rows: make([]SubBlock, p)}
	var wg sync.WaitGroup
	for d := 0; d < p; d++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Blocks[d], l.Rows[d] = buildRowBlock(in, offsets, owner, d, loop, weight)
			l.Used[d] = make([][]int32, p)
			for s := range l.Blocks[d] {
				if s != d {
					l.Used[d][s] = usedColumns(&l.Blocks[d][s])
				}
			}
		}()
	}
	wg.Wait()
	return l, nil
}

// usedColumns returns the distinct columns of b, ascending.
func usedColumns(b *SubBlock) []int32 {
	seen := make([]bool, b.Cols)
	k := 0
	for _, j := range b.Indices {
		if !seen[j] {
			seen[j] = true
			k++
		}
	}
	cols := make([]int32, 0, k)
	for j, ok := range seen {
		if ok {
			cols = append(cols, int32(j))
		}
	}
	return cols
}

// buildRowBlock splits rows [offsets[d], offsets[d+1]) by source block,
// and returns them unsplit too (the same entries with global columns).
func buildRowBlock(in *graph.CSR, offsets []int64, owner []int32, d int, loop []bool,
	weight func(i int, j int32) float32) ([]SubBlock, SubBlock) {
	p := len(offsets) - 1
	lo, hi := int(offsets[d]), int(offsets[d+1])
	rows := hi - lo
	blocks := make([]SubBlock, p)
	counts := make([]int64, p)
	for s := range blocks {
		blocks[s] = SubBlock{Rows: rows, Cols: int(offsets[s+1] - offsets[s]), Indptr: make([]int64, rows+1)}
	}
	var full SubBlock
	if p > 1 {
		full = SubBlock{Rows: rows, Cols: int(offsets[p]), Indptr: make([]int64, rows+1)}
	}
	// Pass 1: entries per (row, source block).
	for i := lo; i < hi; i++ {
		for _, j := range in.Indices[in.Indptr[i]:in.Indptr[i+1]] {
			counts[owner[j]]++
		}
		if loop != nil && loop[i] {
			counts[d]++
		}
		var all int64
		for s := range blocks {
			blocks[s].Indptr[i-lo+1] = counts[s]
			all += counts[s]
		}
		if p > 1 {
			full.Indptr[i-lo+1] = all
		}
	}
	for s := range blocks {
		blocks[s].Indices = make([]int32, counts[s])
		blocks[s].Weights = make([]float32, counts[s])
	}
	if p > 1 {
		full.Indices = make([]int32, full.Indptr[rows])
		full.Weights = make([]float32, full.Indptr[rows])
	}
	var q int64 // next entry of full
	// Pass 2: fill, keeping the row order (the self-loop last).
	next := make([]int64, p)
	for i := lo; i < hi; i++ {
		for _, j := range in.Indices[in.Indptr[i]:in.Indptr[i+1]] {
			s := owner[j]
			b := &blocks[s]
			wt := weight(i, j)
			b.Indices[next[s]] = j - int32(offsets[s])
			b.Weights[next[s]] = wt
			next[s]++
			if p > 1 {
				full.Indices[q], full.Weights[q] = j, wt
				q++
			}
		}
		if loop != nil && loop[i] {
			b := &blocks[d]
			wt := weight(i, int32(i))
			b.Indices[next[d]] = int32(i - lo)
			b.Weights[next[d]] = wt
			next[d]++
			if p > 1 {
				full.Indices[q], full.Weights[q] = int32(i), wt
				q++
			}
		}
	}
	if p == 1 {
		full = blocks[0]
	}
	return blocks, full
}

// Transpose returns the transpose of b restricted to the columns listed
// in cols (ascending, as Layout.Used; nil means every column): a
// len(cols) x b.Rows matrix (b.Cols x b.Rows for nil) whose row k lists,
// in increasing order, the rows of b that hold column cols[k], each with
// its weight. It is the backward operator of A_ds: A_ds^T g is the
// gradient of block s's rows that device d reads. A row of the transpose
// sums its entries in the order a transposed product over b does (by
// increasing edge), so results equal the back ends' transposed SpMM.
func (b *SubBlock) Transpose(cols []int32) (SubBlock, error) {
	nnz := len(b.Indices)
	// pos maps a column of b to its row of the transpose.
	n := b.Cols
	var pos []int32
	if cols != nil {
		n = len(cols)
		pos = make([]int32, b.Cols)
		for i := range pos {
			pos[i] = -1
		}
		for k, j := range cols {
			if j < 0 || int(j) >= b.Cols || (k > 0 && j <= cols[k-1]) {
				return SubBlock{}, layoutErr("transpose: column list not ascending within [0, %d) at %d", b.Cols, k)
			}
			pos[j] = int32(k)
		}
	}
	row := func(j int32) int32 {
		if pos == nil {
			return j
		}
		return pos[j]
	}
	for e, j := range b.Indices {
		if j < 0 || int(j) >= b.Cols || row(j) < 0 {
			return SubBlock{}, layoutErr("transpose: entry %d has column %d outside the %d listed", e, j, n)
		}
	}
	t := SubBlock{Rows: n, Cols: b.Rows, Indptr: make([]int64, n+1), Indices: make([]int32, nnz), Weights: make([]float32, nnz)}
	// Rows of b in chunks, each chunk's entries of one column placed after
	// those of the chunks before it: a stable counting sort, in parallel.
	chunks := 1
	if nnz >= 1<<20 {
		chunks = min(runtime.GOMAXPROCS(0), 8)
	}
	bounds := make([]int, chunks+1)
	for c := 0; c <= chunks; c++ {
		bounds[c] = c * b.Rows / chunks
	}
	counts := make([][]int64, chunks)
	forChunks(chunks, func(c int) {
		cnt := make([]int64, n)
		for _, j := range b.Indices[b.Indptr[bounds[c]]:b.Indptr[bounds[c+1]]] {
			cnt[row(j)]++
		}
		counts[c] = cnt
	})
	var q int64
	for k := 0; k < n; k++ {
		t.Indptr[k] = q
		for c := 0; c < chunks; c++ {
			x := counts[c][k]
			counts[c][k] = q // chunk c's next slot in row k
			q += x
		}
	}
	t.Indptr[n] = q
	forChunks(chunks, func(c int) {
		next := counts[c]
		for i := bounds[c]; i < bounds[c+1]; i++ {
			for e := b.Indptr[i]; e < b.Indptr[i+1]; e++ {
				k := row(b.Indices[e])
				t.Indices[next[k]] = int32(i)
				t.Weights[next[k]] = b.Weights[e]
				next[k]++
			}
		}
	})
	return t, nil
}

// forChunks runs fn(0..n-1) concurrently and waits.
func forChunks(n int, fn func(c int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(c)
		}()
	}
	wg.Wait()
}
