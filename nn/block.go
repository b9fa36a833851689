package nn

import (
	"fmt"
	"math"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

// maxNodes bounds block dimensions: local indices are int32.
const maxNodes = math.MaxInt32

// Block is a back-end resident message-flow graph: A is NumDst x NumSrc in
// CSR form, row i listing the local sources of destination i. Destination
// i is also source i (destinations come first among the sources), which is
// what makes self-loops and the h_dst slice of SAGE well defined.
//
// Derived data is built on first use and cached until Free: per-edge mean
// weights, the self-loop block and its GCN normalization, the row index
// 0..NumDst-1 and the attention selectors of GAT. A Block is not safe for
// concurrent use.
type Block struct {
	A              backend.Sparse
	NumDst, NumSrc int

	b       backend.Backend
	nnz     int
	indptr  []int64 // host copy of the structure, for host-side weights (nil for device-built blocks)
	indices []int32

	mean    backend.Buffer // nnz: 1/in-degree of the edge's destination
	loops   *Block         // A with a self-loop on every destination that lacks one
	gcn     backend.Buffer // nnz of loops: 1/sqrt(outdeg(src)*indeg(dst))
	selAll  backend.Sparse // NumSrc x 1, every row -> column 0
	selDst  backend.Sparse // NumSrc x 1, rows < NumDst -> column 0
	isLoops bool
	srcDeg  []int64 // SetSourceDegrees: GCN out-degrees of the sources, nil to count them
}

// BlockError reports an invalid block or graph.
type BlockError struct{ Msg string }

func (e *BlockError) Error() string { return "nn: block: " + e.Msg }

func blockErr(format string, args ...any) error {
	return &BlockError{Msg: fmt.Sprintf(format, args...)}
}

// NewBlock validates a CSR structure (numDst rows, numSrc columns,
// numDst <= numSrc) and uploads it. The slices are copied.
func NewBlock(b backend.Backend, numDst, numSrc int, indptr []int64, indices []int32) (*Block, error) {
	if err := checkDims(b, numDst, numSrc); err != nil {
		return nil, err
	}
	if len(indptr) != numDst+1 {
		return nil, blockErr("indptr has %d entries, want %d", len(indptr), numDst+1)
	}
	if indptr[0] != 0 || indptr[numDst] != int64(len(indices)) {
		return nil, blockErr("indptr must start at 0 and end at %d, got %d..%d", len(indices), indptr[0], indptr[numDst])
	}
	for i := 0; i < numDst; i++ {
		if indptr[i+1] < indptr[i] {
			return nil, blockErr("indptr decreases at row %d", i)
		}
	}
	for e, j := range indices {
		if j < 0 || int(j) >= numSrc {
			return nil, blockErr("edge %d has source %d, want [0, %d)", e, j, numSrc)
		}
	}
	ip := append([]int64(nil), indptr...)
	ix := append([]int32(nil), indices...)
	a, err := b.NewSparse(numDst, numSrc, ip, ix)
	if err != nil {
		return nil, fmt.Errorf("nn: block: %w", err)
	}
	return &Block{A: a, NumDst: numDst, NumSrc: numSrc, b: b, nnz: len(ix), indptr: ip, indices: ix}, nil
}

func checkDims(b backend.Backend, numDst, numSrc int) error {
	if b == nil {
		return blockErr("nil backend")
	}
	if numDst < 0 || numSrc < 0 || numDst > maxNodes || numSrc > maxNodes {
		return blockErr("bad dimensions %d x %d", numDst, numSrc)
	}
	if numDst > numSrc {
		return blockErr("%d destinations but only %d sources: destinations must be the first sources", numDst, numSrc)
	}
	return nil
}

// NewBlockOwned is NewBlock for a structure its caller built and is
// done with (a chunk of layer-wise inference: millions of edges each):
// the Block takes indptr and indices as they are, and the caller must
// not change them afterwards. NewBlock checks and copies the arrays,
// then the back end's NewSparse checks them again and copies or uploads
// them; here only the back end checks them, once, and a back end that
// can hold host arrays (backend.SparseAdopter, the CPU's) keeps these
// instead of copying them. Nothing is trusted: invalid arrays are an
// error as from NewBlock (its back end's error, wrapped). On error the
// caller keeps the arrays.
func NewBlockOwned(b backend.Backend, numDst, numSrc int, indptr []int64, indices []int32) (*Block, error) {
	if err := checkDims(b, numDst, numSrc); err != nil {
		return nil, err
	}
	var a backend.Sparse
	var err error
	if ad, ok := b.(backend.SparseAdopter); ok {
		a, err = ad.AdoptSparse(numDst, numSrc, indptr, indices)
	} else {
		a, err = b.NewSparse(numDst, numSrc, indptr, indices)
	}
	if err != nil {
		return nil, fmt.Errorf("nn: block: %w", err)
	}
	return &Block{A: a, NumDst: numDst, NumSrc: numSrc, b: b, nnz: len(indices), indptr: indptr, indices: indices}, nil
}

// hostCSR is implemented by Sparse matrices whose structure lives in host
// memory (the CPU back end's).
type hostCSR interface {
	Indptr() []int64
	Indices() []int32
}

// SparseDeriver is implemented by back ends that derive a block's
// self-loop variant and GCN weights on the device, so that blocks made by
// NewBlockFromSparse never need a host copy (the CUDA back end does).
type SparseDeriver interface {
	// AddSelfLoops returns a new Sparse: a with the entry (i, i) appended
	// to the end of every row i that lacks one (a must have at least as
	// many columns as rows).
	AddSelfLoops(a backend.Sparse) (backend.Sparse, error)
	// GCNNorm writes, for every edge e = (i, j) of a, out[e] =
	// 1/sqrt(max(indeg(i),1) * max(outdeg(j),1)) computed in float64
	// (indeg: entries in row i, outdeg: entries in column j).
	GCNNorm(out backend.Buffer, a backend.Sparse) error
}

// NewBlockFromSparse makes a Block of a back-end resident CSR matrix: a
// has NumDst rows and NumSrc >= NumDst columns. Nothing is copied to the
// host: mean weights come from RowDegreeInv and ExpandRowsToEdges on the
// back end, the self-loop block and GCN weights from the back end's
// SparseDeriver methods (or, for a Sparse that exposes host arrays, as
// the CPU back end's does, from those). The structure is trusted as a
// back end built it (the GPU sampler's blocks); only the shape is
// checked. The Block takes ownership of a (Free releases it); on error
// the caller keeps it.
func NewBlockFromSparse(b backend.Backend, a backend.Sparse) (*Block, error) {
	if b == nil {
		return nil, blockErr("nil backend")
	}
	if a == nil {
		return nil, blockErr("nil sparse matrix")
	}
	numDst, numSrc, nnz := a.NumRows(), a.NumCols(), a.NNZ()
	if numDst < 0 || numSrc < 0 || numDst > maxNodes || numSrc > maxNodes || nnz < 0 {
		return nil, blockErr("bad dimensions %d x %d (%d entries)", numDst, numSrc, nnz)
	}
	if numDst > numSrc {
		return nil, blockErr("%d destinations but only %d sources: destinations must be the first sources", numDst, numSrc)
	}
	k := &Block{A: a, NumDst: numDst, NumSrc: numSrc, b: b, nnz: nnz}
	if h, ok := a.(hostCSR); ok {
		k.indptr, k.indices = h.Indptr(), h.Indices()
		if len(k.indptr) != numDst+1 || len(k.indices) != nnz {
			return nil, blockErr("host arrays of %d and %d entries for %d rows and %d entries", len(k.indptr), len(k.indices), numDst, nnz)
		}
	}
	return k, nil
}

// UploadBlock uploads a sampled block: rows are its NumDst destinations,
// columns its len(SrcNodes) sources.
func UploadBlock(b backend.Backend, blk *sample.Block) (*Block, error) {
	if blk == nil {
		return nil, blockErr("nil sample block")
	}
	return NewBlock(b, blk.NumDst, blk.NumSrc(), blk.Indptr, blk.Indices)
}

// UploadBlocks uploads every block of a mini-batch, in order; on a
// failure it frees the ones already uploaded.
func UploadBlocks(b backend.Backend, mb *sample.MiniBatch) ([]*Block, error) {
	if mb == nil {
		return nil, blockErr("nil mini-batch")
	}
	out := make([]*Block, 0, len(mb.Blocks))
	for i := range mb.Blocks {
		blk, err := UploadBlock(b, &mb.Blocks[i])
		if err != nil {
			FreeBlocks(out)
			return nil, err
		}
		out = append(out, blk)
	}
	return out, nil
}

// FreeBlocks frees blocks (nil entries are skipped).
func FreeBlocks(blocks []*Block) {
	for _, k := range blocks {
		if k != nil {
			k.Free()
		}
	}
}

// UploadGraph uploads a whole graph as one square block. Row v of in must
// list the sources of v's incoming edges (the in-adjacency); for a directed
// dataset pass InAdjacency(ds.Graph). Edge weights of in are ignored.
func UploadGraph(b backend.Backend, in *graph.CSR) (*Block, error) {
	if in == nil {
		return nil, blockErr("nil graph")
	}
	if in.NumRows != in.NumCols {
		return nil, blockErr("graph is %d x %d, want square", in.NumRows, in.NumCols)
	}
	if in.NumRows < 0 || in.NumRows > maxNodes {
		return nil, blockErr("graph has %d nodes", in.NumRows)
	}
	n := int(in.NumRows)
	return NewBlock(b, n, n, in.Indptr, in.Indices)
}

// InAdjacency returns the transpose of g (row v lists the sources of v's
// incoming edges), with each row's entries in ascending order.
func InAdjacency(g *graph.CSR) (*graph.CSR, error) {
	if g == nil {
		return nil, blockErr("nil graph")
	}
	if g.NumRows < 0 || g.NumCols < 0 || g.NumCols > maxNodes || int64(len(g.Indptr)) != g.NumRows+1 {
		return nil, blockErr("malformed CSR (%d rows, %d cols, %d indptr)", g.NumRows, g.NumCols, len(g.Indptr))
	}
	nc := int(g.NumCols)
	counts := make([]int64, nc+1)
	for _, j := range g.Indices {
		if j < 0 || int64(j) >= g.NumCols {
			return nil, blockErr("column %d out of range [0, %d)", j, g.NumCols)
		}
		counts[j+1]++
	}
	for i := 0; i < nc; i++ {
		counts[i+1] += counts[i]
	}
	if counts[nc] != int64(len(g.Indices)) || g.Indptr[g.NumRows] != int64(len(g.Indices)) {
		return nil, blockErr("indptr does not match %d indices", len(g.Indices))
	}
	next := append([]int64(nil), counts[:nc]...)
	out := make([]int32, len(g.Indices))
	for r := int64(0); r < g.NumRows; r++ {
		lo, hi := g.Indptr[r], g.Indptr[r+1]
		if lo > hi || lo < 0 || hi > int64(len(g.Indices)) {
			return nil, blockErr("bad indptr at row %d", r)
		}
		for _, j := range g.Indices[lo:hi] {
			out[next[j]] = int32(r)
			next[j]++
		}
	}
	return &graph.CSR{NumRows: g.NumCols, NumCols: g.NumRows, Indptr: counts, Indices: out}, nil
}

// NNZ returns the number of edges.
func (k *Block) NNZ() int { return k.nnz }

// onDevice reports whether the block has no host copy of its structure.
func (k *Block) onDevice() bool { return k.indptr == nil }

// Free releases the block and everything cached on it. Free on nil is a
// no-op; a freed block must not be used.
func (k *Block) Free() {
	if k == nil || k.b == nil {
		return
	}
	b := k.b
	b.FreeSparse(k.A)
	b.Free(k.mean)
	b.Free(k.gcn)
	if k.selAll != nil {
		b.FreeSparse(k.selAll)
	}
	if k.selDst != nil {
		b.FreeSparse(k.selDst)
	}
	k.loops.Free()
	*k = Block{}
}

func (k *Block) live() error {
	if k == nil || k.b == nil || k.A == nil {
		return blockErr("nil or freed block")
	}
	return nil
}

func (k *Block) upload(name string, data []float32) (backend.Buffer, error) {
	buf, err := k.b.Alloc(backend.Float32, len(data))
	if err != nil {
		return nil, fmt.Errorf("nn: block %s: %w", name, err)
	}
	if err := k.b.Upload(buf, data); err != nil {
		k.b.Free(buf)
		return nil, fmt.Errorf("nn: block %s: %w", name, err)
	}
	return buf, nil
}

// MeanWeights returns per-edge weights 1/in-degree(dst) (nnz x 1), which
// turn a sum SpMM into mean aggregation; rows without edges aggregate to 0.
func (k *Block) MeanWeights() (backend.Buffer, error) {
	if err := k.live(); err != nil {
		return nil, err
	}
	// A back end that computes them (a GPU) does so for host-built blocks
	// too: a host pass and an upload of nnz weights cost more than one
	// launch (papers inference: 1.3M edges a chunk).
	if _, ok := k.b.(backend.MeanWeighter); k.mean == nil && (k.onDevice() || ok) {
		buf, err := k.deviceMean()
		if err != nil {
			return nil, err
		}
		k.mean = buf
	}
	if k.mean == nil {
		w := make([]float32, len(k.indices))
		for i := 0; i < k.NumDst; i++ {
			lo, hi := k.indptr[i], k.indptr[i+1]
			inv := float32(1 / float64(max(hi-lo, 1)))
			for e := lo; e < hi; e++ {
				w[e] = inv
			}
		}
		buf, err := k.upload("mean weights", w)
		if err != nil {
			return nil, err
		}
		k.mean = buf
	}
	return k.mean, nil
}

// deviceMean computes the mean weights on the back end: 1/max(deg,1) per
// row, expanded to the row's edges (in one pass where the back end is a
// backend.MeanWeighter).
func (k *Block) deviceMean() (backend.Buffer, error) {
	if mw, ok := k.b.(backend.MeanWeighter); ok {
		w, err := mw.MeanEdgeWeights(k.A)
		if err != nil {
			return nil, fmt.Errorf("nn: block mean weights: %w", err)
		}
		return w, nil
	}
	inv, err := k.b.Alloc(backend.Float32, k.NumDst)
	if err != nil {
		return nil, fmt.Errorf("nn: block mean weights: %w", err)
	}
	defer k.b.Free(inv)
	w, err := k.b.Alloc(backend.Float32, k.nnz)
	if err != nil {
		return nil, fmt.Errorf("nn: block mean weights: %w", err)
	}
	if err := k.b.RowDegreeInv(inv, k.A, false); err != nil {
		k.b.Free(w)
		return nil, fmt.Errorf("nn: block mean weights: %w", err)
	}
	if err := k.b.ExpandRowsToEdges(w, k.A, inv); err != nil {
		k.b.Free(w)
		return nil, fmt.Errorf("nn: block mean weights: %w", err)
	}
	return w, nil
}

// deriver returns the back end's SparseDeriver for a device-built block.
func (k *Block) deriver(what string) (SparseDeriver, error) {
	d, ok := k.b.(SparseDeriver)
	if !ok {
		return nil, blockErr("%s of a device-built block: back end %s cannot derive it on the device (no SparseDeriver)", what, k.b.Name())
	}
	return d, nil
}

// WithSelfLoops returns the block with an edge i -> i added to every
// destination i that lacks one (as PyG's add_remaining_self_loops), appended
// at the end of the row. Valid because destination i is source i. The
// result is cached and freed with k; a block that already is a self-loop
// block returns itself.
func (k *Block) WithSelfLoops() (*Block, error) {
	if err := k.live(); err != nil {
		return nil, err
	}
	if k.isLoops {
		return k, nil
	}
	if k.loops == nil && k.onDevice() {
		d, err := k.deriver("self-loops")
		if err != nil {
			return nil, err
		}
		a, err := d.AddSelfLoops(k.A)
		if err != nil {
			return nil, fmt.Errorf("nn: block self-loops: %w", err)
		}
		l, err := NewBlockFromSparse(k.b, a)
		if err != nil {
			k.b.FreeSparse(a)
			return nil, err
		}
		l.isLoops = true
		k.loops = l
	}
	if k.loops == nil {
		ip := make([]int64, k.NumDst+1)
		ix := make([]int32, 0, len(k.indices)+k.NumDst)
		for i := 0; i < k.NumDst; i++ {
			row := k.indices[k.indptr[i]:k.indptr[i+1]]
			has := false
			for _, j := range row {
				if int(j) == i {
					has = true
					break
				}
			}
			ix = append(ix, row...)
			if !has {
				ix = append(ix, int32(i))
			}
			ip[i+1] = int64(len(ix))
		}
		l, err := NewBlockOwned(k.b, k.NumDst, k.NumSrc, ip, ix) // built here, nobody else's
		if err != nil {
			return nil, err
		}
		l.isLoops = true
		k.loops = l
	}
	return k.loops, nil
}

// SetSourceDegrees makes GCNWeights take deg[j] (>= 1) as the
// out-degree of source j instead of counting the self-loop block's
// column j. A block that holds some destinations of a larger graph with
// all their in-edges (a chunk of layer-wise inference) then gets the
// whole graph's normalization: pass the whole self-loop graph's
// out-degrees of the block's sources. Only for blocks with a host copy
// of their structure, before the weights are first computed.
func (k *Block) SetSourceDegrees(deg []int64) error {
	if err := k.live(); err != nil {
		return err
	}
	switch {
	case k.onDevice():
		return blockErr("source degrees of a device-built block")
	case len(deg) != k.NumSrc:
		return blockErr("%d source degrees for %d sources", len(deg), k.NumSrc)
	case k.gcn != nil || (k.loops != nil && k.loops.gcn != nil):
		return blockErr("source degrees set after the GCN weights were computed")
	}
	for j, d := range deg {
		if d < 1 {
			return blockErr("source %d has degree %d, want >= 1", j, d)
		}
	}
	k.srcDeg = deg
	return nil
}

// GCNWeights returns the symmetric normalization of the self-loop block
// (DGL GraphConv norm='both' on the block with self-loops): for edge
// e = (dst i, src j), w_e = 1/sqrt(max(outdeg(j),1) * max(indeg(i),1)),
// degrees counted in the self-loop block. On a full symmetric graph this is
// D^-1/2 (A+I) D^-1/2. The weights align with WithSelfLoops().A.
func (k *Block) GCNWeights() (backend.Buffer, error) {
	srcDeg := k.srcDeg
	l, err := k.WithSelfLoops()
	if err != nil {
		return nil, err
	}
	if l.gcn == nil && l.onDevice() {
		d, err := l.deriver("GCN weights")
		if err != nil {
			return nil, err
		}
		w, err := l.b.Alloc(backend.Float32, l.nnz)
		if err != nil {
			return nil, fmt.Errorf("nn: block gcn weights: %w", err)
		}
		if err := d.GCNNorm(w, l.A); err != nil {
			l.b.Free(w)
			return nil, fmt.Errorf("nn: block gcn weights: %w", err)
		}
		l.gcn = w
	}
	if l.gcn == nil {
		out := srcDeg
		if out == nil {
			out = make([]int64, l.NumSrc)
			for _, j := range l.indices {
				out[j]++
			}
		}
		w := make([]float32, len(l.indices))
		for i := 0; i < l.NumDst; i++ {
			lo, hi := l.indptr[i], l.indptr[i+1]
			in := float64(max(hi-lo, 1))
			for e := lo; e < hi; e++ {
				w[e] = float32(1 / math.Sqrt(in*float64(max(out[l.indices[e]], 1))))
			}
		}
		buf, err := l.upload("gcn weights", w)
		if err != nil {
			return nil, err
		}
		l.gcn = buf
	}
	return l.gcn, nil
}

// selectors returns two NumSrc x 1 matrices whose rows point at column 0:
// all rows, and only the first NumDst rows. An SDDMM dot over them with a
// 1 x H*D vector computes per-node, per-head projections <z_n, a> of GAT.
func (k *Block) selectors() (all, dst backend.Sparse, err error) {
	if err := k.live(); err != nil {
		return nil, nil, err
	}
	mk := func(edges int) (backend.Sparse, error) {
		ip := make([]int64, k.NumSrc+1)
		for i := range k.NumSrc {
			ip[i+1] = int64(min(i+1, edges))
		}
		s, err := k.b.NewSparse(k.NumSrc, 1, ip, make([]int32, edges))
		if err != nil {
			return nil, fmt.Errorf("nn: block selector: %w", err)
		}
		return s, nil
	}
	if k.selAll == nil {
		if k.selAll, err = mk(k.NumSrc); err != nil {
			return nil, nil, err
		}
	}
	if k.selDst == nil {
		if k.selDst, err = mk(k.NumDst); err != nil {
			return nil, nil, err
		}
	}
	return k.selAll, k.selDst, nil
}
