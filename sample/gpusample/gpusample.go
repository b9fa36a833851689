package gpusample

import (
	_ "embed"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
)

//go:embed sample.cu
var kernelSrc string

// Placement says where the graph structure lives.
type Placement uint8

const (
	// OnDevice copies indptr and indices into GPU memory.
	OnDevice Placement = iota
	// Mapped pins them in host memory mapped into the GPU's address space;
	// kernels read them over the bus (zero-copy, UVA).
	Mapped
	// Split keeps the row offsets in GPU memory and the adjacency (and
	// edge weights) in mapped pinned host memory, plus a GPU copy of the
	// rows in Config.DeviceRows: their neighbors are read from GPU
	// memory, the others' over the bus (DSP's topology cache). Draws are
	// the same as with the other placements.
	Split
)

// Config configures a Sampler; the fields mean what they mean in
// sample.Config.
type Config struct {
	Fanouts   []int
	Replace   bool
	Weighted  bool
	Placement Placement
	// DeviceRows are the rows whose adjacency Split copies to the GPU
	// (each at most once); only with Split.
	DeviceRows []graph.NodeID
}

// Sampler draws mini-batches on one GPU. It is safe for concurrent use
// (calls serialize on the device).
type Sampler struct {
	dev device
	n   int64
	cfg Config
	fns map[string]backend.Kernel
	// The topology, as kernel arguments: a device buffer, an address of
	// mapped pinned host memory, or 0 when absent.
	indptr backend.Arg // int64 n+1
	index  backend.Arg // int32 nnz
	cum    backend.Arg // float64 nnz (weighted with replacement)
	w      backend.Arg // float32 nnz (weighted)
	posDeg backend.Arg // int32 n (weighted)
	dpos   backend.Arg // Split: int64 n, row v's start in didx or -1
	didx   backend.Arg // Split: int32, the adjacency of the device rows
	// devBytes and hostBytes are the topology's bytes in GPU memory and
	// in pinned host memory.
	devBytes, hostBytes int64
	owned               []backend.Buffer
	hosts               []backend.HostBuffer

	mu     sync.Mutex           // guards the pools and closed
	sizes  []backend.HostBuffer // idle pinned areas for per-hop {nd, E, numSrc}
	fences []backend.Fence      // idle fences marking the end of a batch's work
	closed bool
}

// device is what a Sampler needs of its back end (found once, in New):
// kernels compiled at run time and a queue to launch them on, pinned
// memory (mapped, for the Mapped and Split placements; and for reading
// sizes), fences, and matrices over the blocks it builds.
type device interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.PinnedMemory
	backend.Fences
	backend.SparseBuilder
}

// asDevice returns b's capabilities, or an error naming what it lacks.
func asDevice(op string, b backend.Backend) (device, error) {
	if b == nil {
		return nil, &sample.Error{Op: op, Field: "dev", Pos: -1, Detail: "nil device", Err: sample.ErrConfig}
	}
	d, ok := b.(device)
	if !ok {
		return nil, &sample.Error{Op: op, Field: "dev", Pos: -1, Err: sample.ErrConfig,
			Detail: b.Name() + " cannot sample on the device: it lacks run-time kernels, a queue, pinned memory, fences or sparse matrices over its buffers (backend.Kernels, Enqueuer, PinnedMemory, Fences, SparseBuilder)"}
	}
	return d, nil
}

var _ sample.Sampler = (*Sampler)(nil)

// New checks g (an in-adjacency CSR, square) and cfg, and places the graph
// on b, a back end with the capabilities listed in the package doc (the
// CUDA back end).
func New(b backend.Backend, g *graph.CSR, cfg Config) (*Sampler, error) {
	const op = "gpusample.New"
	dev, err := asDevice(op, b)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, &sample.Error{Op: op, Field: "graph", Pos: -1, Detail: "nil graph", Err: sample.ErrGraph}
	}
	if err := g.Validate(); err != nil {
		return nil, &sample.Error{Op: op, Field: "graph", Pos: -1, Detail: err.Error(), Err: sample.ErrGraph}
	}
	if g.NumRows != g.NumCols {
		return nil, &sample.Error{Op: op, Field: "graph", Pos: -1, Detail: fmt.Sprintf("%d x %d is not square", g.NumRows, g.NumCols), Err: sample.ErrGraph}
	}
	// Node IDs are int32; edge positions (indptr values, offsets into
	// the per-edge arrays) are int64 here and in the kernels, so the
	// edge count is not bounded (papers100M stores 3.2G edges).
	if g.NumRows >= math.MaxInt32 {
		return nil, &sample.Error{Op: op, Field: "graph", Pos: -1, Detail: fmt.Sprintf("%d nodes: at most 2^31-2", g.NumRows), Err: sample.ErrTooLarge}
	}
	if len(cfg.Fanouts) == 0 {
		return nil, &sample.Error{Op: op, Field: "Fanouts", Pos: -1, Detail: "empty: need one fanout per hop", Err: sample.ErrConfig}
	}
	for i, f := range cfg.Fanouts {
		if f != -1 && f <= 0 {
			return nil, &sample.Error{Op: op, Field: "Fanouts", Pos: i, Detail: fmt.Sprintf("%d: want -1 (all) or > 0", f), Err: sample.ErrConfig}
		}
	}
	if cfg.Placement != OnDevice && cfg.Placement != Mapped && cfg.Placement != Split {
		return nil, &sample.Error{Op: op, Field: "Placement", Pos: -1, Detail: fmt.Sprintf("unknown placement %d", cfg.Placement), Err: sample.ErrConfig}
	}
	if cfg.Placement != Split && len(cfg.DeviceRows) > 0 {
		return nil, &sample.Error{Op: op, Field: "DeviceRows", Pos: -1, Detail: "only with the Split placement", Err: sample.ErrConfig}
	}
	var dpos []int64
	var didx []int32
	if cfg.Placement == Split {
		var err error
		if dpos, didx, err = splitRows(g, cfg.DeviceRows); err != nil {
			return nil, err
		}
	}
	cfg.Fanouts = slices.Clone(cfg.Fanouts)
	cfg.DeviceRows = nil // copied into dpos/didx
	s := &Sampler{dev: dev, n: g.NumRows, cfg: cfg}
	var cum []float64
	var posDeg []int32
	if cfg.Weighted {
		if posDeg, cum, err = edgeWeights(op, g, cfg.Replace); err != nil {
			return nil, err
		}
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Sampler, error) { s.Close(); return nil, err }
	// Per-row arrays stay on the GPU with Split; per-edge arrays go to
	// host memory there (the device rows' neighbors are copied).
	rowsOnHost, edgesOnHost := cfg.Placement == Mapped, cfg.Placement != OnDevice
	if s.indptr, err = s.place(g.Indptr, rowsOnHost); err != nil {
		return fail(err)
	}
	if s.index, err = s.place(g.Indices, edgesOnHost); err != nil {
		return fail(err)
	}
	if cfg.Weighted {
		if s.w, err = s.place(g.Weights, edgesOnHost); err != nil {
			return fail(err)
		}
		if s.posDeg, err = s.place(posDeg, rowsOnHost); err != nil {
			return fail(err)
		}
		if cum != nil {
			if s.cum, err = s.place(cum, edgesOnHost); err != nil {
				return fail(err)
			}
		}
	}
	if cfg.Placement == Split {
		if s.dpos, err = s.place(dpos, false); err != nil {
			return fail(err)
		}
		if s.didx, err = s.place(didx, false); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// load compiles (or finds cached) and loads the kernels on s.dev.
func (s *Sampler) load() error {
	mod, err := s.dev.LoadKernels("gpusample", kernelSrc)
	if err != nil {
		return err
	}
	s.fns = map[string]backend.Kernel{}
	for _, name := range []string{"gs_count", "gs_sample", "gs_insert", "gs_flags", "gs_relabel"} {
		if s.fns[name], err = mod.Kernel(name); err != nil {
			return err
		}
	}
	return nil
}

// Sibling returns a sampler on b, another handle of the same GPU (its
// own stream, lock and allocator: backend.Siblings), that reads s's
// topology in place: nothing is copied, and it draws the same batches as
// s. Several goroutines can then sample at once without serializing on
// one stream. The sibling owns no topology (TopologyBytes reports 0);
// close it before s.
func (s *Sampler) Sibling(b backend.Backend) (*Sampler, error) {
	const op = "gpusample.Sibling"
	dev, err := asDevice(op, b)
	if err != nil {
		return nil, err
	}
	if sib, ok := s.dev.(backend.Siblings); !ok || !sib.SameDevice(dev) {
		return nil, &sample.Error{Op: op, Field: "dev", Pos: -1, Detail: fmt.Sprintf("%s, but the topology is on %s (not a handle of the same GPU)", dev.Name(), s.dev.Name()), Err: sample.ErrConfig}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, &sample.Error{Op: op, Field: "sampler", Pos: -1, Detail: "closed", Err: sample.ErrConfig}
	}
	// The topology's uploads ran on s's stream: the sibling's reads
	// must come after them.
	if err := s.dev.Synchronize(); err != nil {
		return nil, err
	}
	t := &Sampler{dev: dev, n: s.n, cfg: s.cfg, indptr: s.indptr, index: s.index, cum: s.cum, w: s.w, posDeg: s.posDeg,
		dpos: s.dpos, didx: s.didx}
	t.cfg.Fanouts = slices.Clone(s.cfg.Fanouts)
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

// maxPosDeg bounds a row's positive-weight edges: posDeg holds int32
// counts (a variable so that tests can lower it).
var maxPosDeg int64 = math.MaxInt32

// edgeWeights checks g's weights (finite, >= 0) and returns each row's
// count of positive-weight edges and, with replace, the running weight
// sums of each row at its edges' positions (int64 positions: the graph
// may hold more than 2^31 edges).
func edgeWeights(op string, g *graph.CSR, replace bool) (posDeg []int32, cum []float64, err error) {
	if g.Weights == nil {
		return nil, nil, &sample.Error{Op: op, Field: "graph.Weights", Pos: -1, Detail: "nil, but Weighted sampling needs edge weights", Err: sample.ErrGraph}
	}
	posDeg = make([]int32, g.NumRows)
	if replace {
		cum = make([]float64, len(g.Weights))
	}
	for v := int64(0); v < g.NumRows; v++ {
		var sum float64
		var pos int64
		for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
			w := g.Weights[e]
			if !(w >= 0) || math.IsInf(float64(w), 1) {
				return nil, nil, &sample.Error{Op: op, Field: "graph.Weights", Pos: int(e), Detail: fmt.Sprintf("%v: weights must be finite and >= 0", w), Err: sample.ErrGraph}
			}
			if w > 0 {
				pos++
			}
			sum += float64(w)
			if cum != nil {
				cum[e] = sum
			}
		}
		if pos > maxPosDeg {
			return nil, nil, &sample.Error{Op: op, Field: "graph.Weights", Pos: int(v), Detail: fmt.Sprintf("row %d has %d positive-weight edges, more than %d", v, pos, maxPosDeg), Err: sample.ErrTooLarge}
		}
		posDeg[v] = int32(pos)
	}
	return posDeg, cum, nil
}

// splitRows checks rows (in range, no repeats) and lays out their
// adjacency: dpos[v] is row v's start in didx, -1 for rows not listed.
func splitRows(g *graph.CSR, rows []graph.NodeID) (dpos []int64, didx []int32, err error) {
	bad := func(pos int, format string, args ...any) ([]int64, []int32, error) {
		return nil, nil, &sample.Error{Op: "gpusample.New", Field: "DeviceRows", Pos: pos, Detail: fmt.Sprintf(format, args...), Err: sample.ErrConfig}
	}
	if int64(len(rows)) > g.NumRows {
		return bad(-1, "%d rows for a graph of %d", len(rows), g.NumRows)
	}
	dpos = make([]int64, g.NumRows)
	for i := range dpos {
		dpos[i] = -1
	}
	var total int64
	for i, v := range rows {
		if v < 0 || int64(v) >= g.NumRows {
			return bad(i, "row %d not in [0, %d)", v, g.NumRows)
		}
		if dpos[v] >= 0 {
			return bad(i, "row %d repeats", v)
		}
		dpos[v] = total
		total += g.Indptr[v+1] - g.Indptr[v]
	}
	didx = make([]int32, 0, total)
	for _, v := range rows {
		didx = append(didx, g.Indices[g.Indptr[v]:g.Indptr[v+1]]...)
	}
	return dpos, didx, nil
}

// TopologyBytes returns the bytes of the graph structure (row offsets,
// adjacency, weights, the split's index and copy) in GPU memory and in
// pinned host memory.
func (s *Sampler) TopologyBytes() (device, host int64) { return s.devBytes, s.hostBytes }

// place copies a host array to the device, or into mapped pinned memory
// when onHost, and returns it as a kernel argument.
func (s *Sampler) place(data any, onHost bool) (backend.Arg, error) {
	var n, size int
	var p unsafe.Pointer
	var dt backend.DType
	switch v := data.(type) {
	case []int64:
		n, size, dt = len(v), 8, backend.Int64
		if n > 0 {
			p = unsafe.Pointer(&v[0])
		}
	case []int32:
		n, size, dt = len(v), 4, backend.Int32
		if n > 0 {
			p = unsafe.Pointer(&v[0])
		}
	case []float32:
		n, size, dt = len(v), 4, backend.Float32
		if n > 0 {
			p = unsafe.Pointer(&v[0])
		}
	case []float64:
		n, size, dt = len(v), 8, backend.Int64 // 8-byte elements
		if n > 0 {
			p = unsafe.Pointer(&v[0])
		}
	default:
		return backend.Arg{}, fmt.Errorf("gpusample: place %T", data)
	}
	if n == 0 {
		return backend.Arg{}, nil
	}
	bytes := unsafe.Slice((*byte)(p), n*size)
	if onHost {
		h, err := s.dev.AllocPinned(uint64(len(bytes)), true)
		if err != nil {
			return backend.Arg{}, err
		}
		copy(h.Bytes(), bytes)
		s.hosts = append(s.hosts, h)
		s.hostBytes += int64(len(bytes))
		return backend.Addr(h.DeviceAddr()), nil
	}
	s.devBytes += int64(len(bytes))
	b, err := s.dev.Alloc(dt, n)
	if err != nil {
		return backend.Arg{}, err
	}
	s.owned = append(s.owned, b)
	var uerr error
	switch v := data.(type) {
	case []float64:
		uerr = s.dev.Upload(b, unsafe.Slice((*int64)(unsafe.Pointer(&v[0])), n))
	default:
		uerr = s.dev.Upload(b, data)
	}
	return backend.Buf(b), uerr
}

// Close releases the graph copy. The Sampler must not be used afterwards
// (pending batches must have been waited for).
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, f := range s.fences {
		keep(f.Close())
	}
	for _, b := range s.owned {
		s.dev.Free(b)
	}
	for _, h := range append(s.hosts, s.sizes...) {
		if h != nil {
			keep(h.Free())
		}
	}
	s.owned, s.hosts, s.sizes, s.fences, s.closed = nil, nil, nil, nil, true
	return first
}

// take returns a pinned sizes area and a fence from the pools, making
// them when a pool is empty.
func (s *Sampler) take() (backend.HostBuffer, backend.Fence, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, &sample.Error{Op: "gpusample.Sample", Field: "sampler", Pos: -1, Detail: "closed", Err: sample.ErrConfig}
	}
	var h backend.HostBuffer
	if k := len(s.sizes); k > 0 {
		h, s.sizes = s.sizes[k-1], s.sizes[:k-1]
	}
	var f backend.Fence
	if k := len(s.fences); k > 0 {
		f, s.fences = s.fences[k-1], s.fences[:k-1]
	}
	s.mu.Unlock()
	if h == nil {
		var err error
		if h, err = s.dev.AllocPinned(uint64(24*len(s.cfg.Fanouts)+64), false); err != nil {
			s.give(nil, f)
			return nil, nil, err
		}
	}
	if f == nil {
		var err error
		if f, err = s.dev.NewFence(); err != nil {
			s.give(h, nil)
			return nil, nil, err
		}
	}
	return h, f, nil
}

// give returns a sizes area and a fence to the pools.
func (s *Sampler) give(h backend.HostBuffer, f backend.Fence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h != nil {
		s.sizes = append(s.sizes, h)
	}
	if f != nil {
		s.fences = append(s.fences, f)
	}
}

// NumHops is the number of blocks per batch.
func (s *Sampler) NumHops() int { return len(s.cfg.Fanouts) }

// Block is one hop's message-flow graph in device memory. A (rows =
// destinations, columns = sources, local ids) is a back-end Sparse ready
// for SpMM; SrcNodes holds the sources' global ids (destinations first).
type Block struct {
	NumDst, NumSrc, NumEdges int
	A                        backend.Sparse // NumDst x NumSrc
	SrcNodes                 backend.Buffer // int32, NumSrc
	EdgeIDs                  backend.Buffer // int64, NumEdges: positions in the graph's indices
}

// InputNodes returns the device buffer of nodes whose features the first
// layer reads.
func (b *Batch) InputNodes() backend.Buffer { return b.Blocks[0].SrcNodes }

// Batch is a MiniBatch whose blocks stay on the GPU. Blocks[0] consumes
// the input features of Blocks[0].SrcNodes; the last block's destinations
// are the seeds.
type Batch struct {
	dev    backend.Backend
	Seeds  []graph.NodeID
	Blocks []Block
}

// Free releases the batch's device memory.
func (b *Batch) Free() {
	if b == nil {
		return
	}
	for i := range b.Blocks {
		k := &b.Blocks[i]
		if k.A != nil {
			b.dev.FreeSparse(k.A)
		}
		b.dev.Free(k.SrcNodes)
		b.dev.Free(k.EdgeIDs)
	}
	b.Blocks = nil
}

// NNBlocks hands the batch's blocks to package nn without a host copy
// (nn.NewBlockFromSparse), first layer first: the last block's
// destinations are the seeds in order. The nn Blocks own the matrices
// from then on (free them with Block.Free); the Batch keeps its node and
// edge ids, so Free it as well.
func (b *Batch) NNBlocks() ([]*nn.Block, error) {
	out := make([]*nn.Block, 0, len(b.Blocks))
	for i := range b.Blocks {
		k := &b.Blocks[i]
		if k.A == nil {
			for _, o := range out {
				o.Free()
			}
			return nil, fmt.Errorf("gpusample: block %d has no matrix (handed out already?)", i)
		}
		blk, err := nn.NewBlockFromSparse(b.dev, k.A)
		if err != nil {
			for _, o := range out {
				o.Free()
			}
			return nil, err
		}
		out = append(out, blk)
	}
	for i := range b.Blocks {
		b.Blocks[i].A = nil
	}
	return out, nil
}

// Download copies the batch into a host sample.MiniBatch.
func (b *Batch) Download() (*sample.MiniBatch, error) {
	mb := &sample.MiniBatch{Seeds: slices.Clone(b.Seeds), Blocks: make([]sample.Block, len(b.Blocks))}
	for i, k := range b.Blocks {
		if k.A == nil {
			return nil, fmt.Errorf("gpusample: block %d was handed to nn (NNBlocks)", i)
		}
		ip, ix, err := csr(k.A)
		if err != nil {
			return nil, err
		}
		hb := sample.Block{
			SrcNodes: make([]graph.NodeID, k.NumSrc),
			NumDst:   k.NumDst,
			Indptr:   make([]int64, k.NumDst+1),
			Indices:  make([]int32, k.NumEdges),
			EdgeIDs:  make([]int64, k.NumEdges),
		}
		for _, c := range []struct {
			dst any
			src backend.Buffer
		}{{hb.SrcNodes, k.SrcNodes}, {hb.Indptr, ip}, {hb.Indices, ix}, {hb.EdgeIDs, k.EdgeIDs}} {
			if err := b.dev.Download(c.dst, c.src); err != nil {
				return nil, err
			}
		}
		mb.Blocks[i] = hb
	}
	return mb, nil
}

// Structure downloads block i's CSR (row pointers and local column
// indices), what nn.NewBlock needs, without the node and edge ids.
func (b *Batch) Structure(i int) (indptr []int64, indices []int32, err error) {
	if i < 0 || i >= len(b.Blocks) {
		return nil, nil, fmt.Errorf("gpusample: block %d of %d", i, len(b.Blocks))
	}
	k := b.Blocks[i]
	if k.A == nil {
		return nil, nil, fmt.Errorf("gpusample: block %d was handed to nn (NNBlocks)", i)
	}
	ip, ix, err := csr(k.A)
	if err != nil {
		return nil, nil, err
	}
	indptr, indices = make([]int64, k.NumDst+1), make([]int32, k.NumEdges)
	if err := b.dev.Download(indptr, ip); err != nil {
		return nil, nil, err
	}
	if err := b.dev.Download(indices, ix); err != nil {
		return nil, nil, err
	}
	return indptr, indices, nil
}

// Sample draws the batch and downloads it (sample.Sampler).
func (s *Sampler) Sample(seeds []graph.NodeID, key sample.Key) (*sample.MiniBatch, error) {
	b, err := s.SampleDevice(seeds, key)
	if err != nil {
		return nil, err
	}
	defer b.Free()
	return b.Download()
}

// checkSeeds requires distinct seeds in [0, n).
func checkSeeds(op string, seeds []graph.NodeID, n int64) error {
	for i, v := range seeds {
		if v < 0 || int64(v) >= n {
			return &sample.Error{Op: op, Field: "seeds", Pos: i, Detail: fmt.Sprintf("node %d not in [0, %d)", v, n), Err: sample.ErrNode}
		}
	}
	sorted := slices.Clone(seeds)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			pos := slices.Index(seeds, sorted[i])
			pos2 := pos + 1 + slices.Index(seeds[pos+1:], sorted[i])
			return &sample.Error{Op: op, Field: "seeds", Pos: pos2, Detail: fmt.Sprintf("node %d already at position %d", sorted[i], pos), Err: sample.ErrDuplicate}
		}
	}
	return nil
}

// csr returns the buffers of a block's matrix (backend.CSRBuffers).
func csr(a backend.Sparse) (indptr, indices backend.Buffer, err error) {
	c, ok := a.(backend.CSRBuffers)
	if !ok {
		return nil, nil, fmt.Errorf("gpusample: a %T block matrix has no CSR buffers (backend.CSRBuffers)", a)
	}
	indptr, indices = c.CSR()
	return indptr, indices, nil
}

// hop holds one hop's device buffers (allocated for upper bounds).
type hop struct {
	ptr, eid, src, local, srcNodes backend.Buffer
	ndmax, emax, pmax              int64
}

// SampleDevice draws the batch for seeds (distinct, in range) and key,
// keeping it on the GPU. The only synchronization is one copy of the
// final sizes (plus one per hop with fanout -1). It is SampleAsync
// followed by Wait.
func (s *Sampler) SampleDevice(seeds []graph.NodeID, key sample.Key) (*Batch, error) {
	p, err := s.SampleAsync(seeds, key)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// Pending is a batch whose sampling is queued on the device's stream.
type Pending struct {
	s     *Sampler
	batch *Batch
	hops  []hop
	keep  []backend.Buffer
	sizes backend.HostBuffer
	fence backend.Fence // marks the end of the batch's work
	done  bool
}

// SampleAsync queues the sampling of seeds (distinct, in range) for key
// on the device's stream and returns without waiting (except for hops
// with fanout -1, which read their exact edge count). Wait returns the
// batch. Because the device runs its work in queue order, a loop that
// queues the next batch's sampling before this batch's training step,
// and waits for it after, keeps the GPU busy while the host prepares the
// next step. Every Pending must be waited for.
func (s *Sampler) SampleAsync(seeds []graph.NodeID, key sample.Key) (*Pending, error) {
	const op = "gpusample.Sample"
	if err := checkSeeds(op, seeds, s.n); err != nil {
		return nil, err
	}
	L := len(s.cfg.Fanouts)
	p := &Pending{s: s, hops: make([]hop, L), batch: &Batch{dev: s.dev, Seeds: slices.Clone(seeds)}}
	hops := p.hops
	var tmp []backend.Buffer
	var err error
	if p.sizes, p.fence, err = s.take(); err != nil {
		return nil, err
	}
	err = s.dev.Enqueue(func(q backend.Queue) error {
		alloc := func(dt backend.DType, n int64, kept bool) (backend.Buffer, error) {
			if n >= math.MaxInt32 {
				return nil, &sample.Error{Op: op, Field: "seeds", Pos: -1, Detail: fmt.Sprintf("a hop would hold up to %d entries", n), Err: sample.ErrTooLarge}
			}
			b, err := q.AllocRaw(dt, int(n))
			if err != nil {
				return nil, err
			}
			if kept {
				p.keep = append(p.keep, b)
			} else {
				tmp = append(tmp, b)
			}
			return b, nil
		}
		// Hop 0's frontier: the seeds, and its length as a device scalar.
		nd0, err := alloc(backend.Int64, 1, false)
		if err != nil {
			return err
		}
		if err := q.UploadFrom(nd0, []int64{int64(len(seeds))}); err != nil {
			return err
		}
		dst, err := alloc(backend.Int32, int64(max(len(seeds), 1)), false)
		if err != nil {
			return err
		}
		if err := q.UploadFrom(dst, seeds); err != nil {
			return err
		}
		ndP := nd0 // the frontier's length on the device
		ndmax := int64(len(seeds))
		for h := 0; h < L; h++ {
			k := s.cfg.Fanouts[h]
			H := &hops[h]
			H.ndmax = ndmax
			counts, err := alloc(backend.Int64, ndmax+1, false)
			if err != nil {
				return err
			}
			if H.ptr, err = alloc(backend.Int64, ndmax+1, true); err != nil {
				return err
			}
			rep, wt := b2i(s.cfg.Replace), b2i(s.cfg.Weighted)
			if err := q.Launch(s.fns["gs_count"], ndmax+1, backend.Buf(counts), backend.Buf(dst), backend.Buf(ndP), backend.I64(ndmax),
				s.indptr, s.posDeg, backend.I32(int32(k)), backend.I32(rep), backend.I32(wt)); err != nil {
				return err
			}
			if err := q.ScanI64(H.ptr, counts, int(ndmax+1)); err != nil {
				return err
			}
			if k >= 0 {
				H.emax = ndmax * int64(k)
			} else {
				// All neighbors: read the exact edge count (one sync).
				// (past the per-hop sizes, which earlier hops already queued)
				last, err := backend.View(H.ptr, int(ndmax), 1)
				if err != nil {
					return err
				}
				if err := q.CopyToHost(p.sizes, uint64(24*L), last, 8); err != nil {
					return err
				}
				if err := q.Sync(); err != nil {
					return err
				}
				H.emax = p.sizes.Int64s()[3*L]
			}
			if H.eid, err = alloc(backend.Int64, max(H.emax, 1), true); err != nil {
				return err
			}
			if H.src, err = alloc(backend.Int32, max(H.emax, 1), false); err != nil {
				return err
			}
			var kscr backend.Buffer
			if s.cfg.Weighted && !s.cfg.Replace {
				if kscr, err = alloc(backend.Int64, max(H.emax, 1), false); err != nil {
					return err
				}
			}
			if err := q.Launch(s.fns["gs_sample"], ndmax, backend.Buf(H.eid), backend.Buf(H.src), backend.Buf(kscr), backend.Buf(H.ptr),
				backend.Buf(dst), backend.Buf(ndP), s.indptr, s.index, s.cum, s.w, s.posDeg,
				backend.I32(int32(k)), backend.I32(rep), backend.I32(wt), backend.U64(sample.HopKey(key, h)), s.dpos, s.didx); err != nil {
				return err
			}
			// Deduplicate and relabel [dst, src].
			H.pmax = ndmax + H.emax
			capacity := int64(1) << bits.Len64(uint64(2*H.pmax+1))
			tkeys, err := alloc(backend.Int32, capacity, false)
			if err != nil {
				return err
			}
			tpos, err := alloc(backend.Int32, capacity, false)
			if err != nil {
				return err
			}
			if err := q.Memset(tkeys, 0xff); err != nil { // -1: empty
				return err
			}
			if err := q.Memset(tpos, 0x7f); err != nil { // large position
				return err
			}
			mask := backend.U64(uint64(capacity - 1))
			if err := q.Launch(s.fns["gs_insert"], H.pmax, backend.Buf(tkeys), backend.Buf(tpos), mask, backend.Buf(dst), backend.Buf(ndP),
				backend.Buf(H.src), backend.Buf(H.ptr)); err != nil {
				return err
			}
			flags, err := alloc(backend.Int64, H.pmax+1, false)
			if err != nil {
				return err
			}
			if err := q.Launch(s.fns["gs_flags"], H.pmax+1, backend.Buf(flags), backend.Buf(tkeys), backend.Buf(tpos), mask,
				backend.Buf(dst), backend.Buf(ndP), backend.Buf(H.src), backend.Buf(H.ptr), backend.I64(H.pmax)); err != nil {
				return err
			}
			newid, err := alloc(backend.Int64, H.pmax+1, false)
			if err != nil {
				return err
			}
			if err := q.ScanI64(newid, flags, int(H.pmax+1)); err != nil {
				return err
			}
			if H.srcNodes, err = alloc(backend.Int32, max(H.pmax, 1), true); err != nil {
				return err
			}
			if H.local, err = alloc(backend.Int32, max(H.emax, 1), true); err != nil {
				return err
			}
			sizes, err := alloc(backend.Int64, 3, false)
			if err != nil {
				return err
			}
			if err := q.Launch(s.fns["gs_relabel"], max(H.pmax, 1), backend.Buf(H.srcNodes), backend.Buf(H.local), backend.Buf(sizes),
				backend.Buf(newid), backend.Buf(tkeys), backend.Buf(tpos), mask, backend.Buf(dst), backend.Buf(ndP),
				backend.Buf(H.src), backend.Buf(H.ptr), backend.I64(H.pmax)); err != nil {
				return err
			}
			if err := q.CopyToHost(p.sizes, uint64(24*h), sizes, 24); err != nil {
				return err
			}
			// The next hop's frontier is this block's sources, its
			// length the third size.
			if ndP, err = backend.View(sizes, 2, 1); err != nil {
				return err
			}
			dst, ndmax = H.srcNodes, H.pmax
		}
		return q.Mark(p.fence)
	})
	for _, b := range tmp {
		s.dev.Free(b)
	}
	if err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// release frees what a failed or abandoned Pending holds.
func (p *Pending) release() {
	for _, b := range p.keep {
		p.s.dev.Free(b)
	}
	p.keep = nil
	p.s.give(p.sizes, p.fence)
	p.sizes, p.fence, p.done = nil, nil, true
}

// Wait blocks until the batch's sampling has run on the device and
// returns it.
func (p *Pending) Wait() (*Batch, error) {
	if p == nil || p.done {
		return nil, fmt.Errorf("gpusample: Wait on a nil or finished Pending")
	}
	s, L, hops, batch := p.s, len(p.hops), p.hops, p.batch
	err := s.dev.Enqueue(func(backend.Queue) error {
		if err := p.fence.Wait(); err != nil {
			return err
		}
		sz := p.sizes.Int64s()
		batch.Blocks = make([]Block, L)
		for h := 0; h < L; h++ {
			H := &hops[h]
			nd, e, ns := sz[3*h], sz[3*h+1], sz[3*h+2]
			if nd > H.ndmax || e > H.emax || ns > H.pmax || nd < 0 || e < 0 || ns < nd {
				return fmt.Errorf("gpusample: hop %d: device sizes nd=%d E=%d src=%d exceed bounds %d/%d/%d", h, nd, e, ns, H.ndmax, H.emax, H.pmax)
			}
			for _, t := range []struct {
				b backend.Buffer
				n int64
			}{{H.ptr, nd + 1}, {H.eid, e}, {H.local, e}, {H.srcNodes, ns}} {
				if err := backend.Truncate(t.b, int(t.n)); err != nil {
					return err
				}
			}
			batch.Blocks[L-1-h] = Block{NumDst: int(nd), NumSrc: int(ns), NumEdges: int(e), SrcNodes: H.srcNodes, EdgeIDs: H.eid}
		}
		return nil
	})
	keep := p.keep
	p.keep = nil
	s.give(p.sizes, p.fence)
	p.sizes, p.fence, p.done = nil, nil, true
	if err != nil {
		for _, b := range keep {
			s.dev.Free(b)
		}
		return nil, err
	}
	var werr error
	for h := 0; h < L; h++ {
		H := &hops[h]
		blk := &batch.Blocks[L-1-h]
		if werr == nil {
			var a backend.Sparse
			if a, werr = s.dev.SparseFromBuffers(blk.NumDst, blk.NumSrc, H.ptr, H.local); werr == nil {
				blk.A = a
			}
		}
		if blk.A == nil {
			s.dev.Free(H.ptr)
			s.dev.Free(H.local)
		}
	}
	if werr != nil {
		batch.Free()
		return nil, werr
	}
	return batch, nil
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
