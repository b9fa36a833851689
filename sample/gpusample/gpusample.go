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
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
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
	dev    *cuda.Device
	n      int64
	cfg    Config
	mod    *cuda.Module
	fns    map[string]cu.Function
	indptr cu.DevPtr // int64 n+1
	index  cu.DevPtr // int32 nnz
	cum    cu.DevPtr // float64 nnz (weighted with replacement)
	w      cu.DevPtr // float32 nnz (weighted)
	posDeg cu.DevPtr // int32 n (weighted)
	dpos   cu.DevPtr // Split: int64 n, row v's start in didx or -1
	didx   cu.DevPtr // Split: int32, the adjacency of the device rows
	// devBytes and hostBytes are the topology's bytes in GPU memory and
	// in pinned host memory.
	devBytes, hostBytes int64
	owned               []*cuda.Buffer
	hosts               []*cuda.HostBuffer

	mu     sync.Mutex         // guards the pools and closed
	sizes  []*cuda.HostBuffer // idle pinned areas for per-hop {nd, E, numSrc}
	events []cu.Event         // idle events marking the end of a batch's work
	closed bool
}

var _ sample.Sampler = (*Sampler)(nil)

// New checks g (an in-adjacency CSR, square) and cfg, and places the graph
// on dev.
func New(dev *cuda.Device, g *graph.CSR, cfg Config) (*Sampler, error) {
	const op = "gpusample.New"
	if dev == nil {
		return nil, &sample.Error{Op: op, Field: "dev", Pos: -1, Detail: "nil device", Err: sample.ErrConfig}
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
	if g.NumRows >= math.MaxInt32 || g.NumEdges() >= math.MaxInt32 {
		return nil, &sample.Error{Op: op, Field: "graph", Pos: -1, Detail: "more than 2^31-1 nodes or edges", Err: sample.ErrTooLarge}
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
		if g.Weights == nil {
			return nil, &sample.Error{Op: op, Field: "graph.Weights", Pos: -1, Detail: "nil, but Weighted sampling needs edge weights", Err: sample.ErrGraph}
		}
		posDeg = make([]int32, g.NumRows)
		if cfg.Replace {
			cum = make([]float64, len(g.Weights))
		}
		for v := int64(0); v < g.NumRows; v++ {
			var sum float64
			for e := g.Indptr[v]; e < g.Indptr[v+1]; e++ {
				w := g.Weights[e]
				if !(w >= 0) || math.IsInf(float64(w), 1) {
					return nil, &sample.Error{Op: op, Field: "graph.Weights", Pos: int(e), Detail: fmt.Sprintf("%v: weights must be finite and >= 0", w), Err: sample.ErrGraph}
				}
				if w > 0 {
					posDeg[v]++
				}
				sum += float64(w)
				if cum != nil {
					cum[e] = sum
				}
			}
		}
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	var err error
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
	mod, err := s.dev.LoadModule("gpusample", cuda.CommonSource()+kernelSrc)
	if err != nil {
		return err
	}
	s.mod = mod
	s.fns = map[string]cu.Function{}
	for _, name := range []string{"gs_count", "gs_sample", "gs_insert", "gs_flags", "gs_relabel"} {
		if s.fns[name], err = mod.Func(name); err != nil {
			return err
		}
	}
	return nil
}

// Sibling returns a sampler on dev, another handle of the same GPU (its
// own stream, lock and allocator), that reads s's topology in place:
// nothing is copied, and it draws the same batches as s. Several
// goroutines can then sample at once without serializing on one stream.
// The sibling owns no topology (TopologyBytes reports 0); close it
// before s.
func (s *Sampler) Sibling(dev *cuda.Device) (*Sampler, error) {
	const op = "gpusample.Sibling"
	if dev == nil {
		return nil, &sample.Error{Op: op, Field: "dev", Pos: -1, Detail: "nil device", Err: sample.ErrConfig}
	}
	if dev.Ordinal() != s.dev.Ordinal() {
		return nil, &sample.Error{Op: op, Field: "dev", Pos: -1, Detail: fmt.Sprintf("GPU %d, but the topology is on GPU %d", dev.Ordinal(), s.dev.Ordinal()), Err: sample.ErrConfig}
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
// when onHost.
func (s *Sampler) place(data any, onHost bool) (cu.DevPtr, error) {
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
		return 0, fmt.Errorf("gpusample: place %T", data)
	}
	if n == 0 {
		return 0, nil
	}
	bytes := unsafe.Slice((*byte)(p), n*size)
	if onHost {
		h, err := s.dev.AllocHost(uint64(len(bytes)), true)
		if err != nil {
			return 0, err
		}
		copy(h.Bytes(), bytes)
		s.hosts = append(s.hosts, h)
		s.hostBytes += int64(len(bytes))
		return h.DevPtr(), nil
	}
	s.devBytes += int64(len(bytes))
	buf, err := s.dev.Alloc(dt, n)
	if err != nil {
		return 0, err
	}
	b := buf.(*cuda.Buffer)
	s.owned = append(s.owned, b)
	var uerr error
	switch v := data.(type) {
	case []float64:
		uerr = s.dev.Upload(b, unsafe.Slice((*int64)(unsafe.Pointer(&v[0])), n))
	default:
		uerr = s.dev.Upload(b, data)
	}
	return b.Ptr(), uerr
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
	if len(s.events) > 0 {
		keep(s.dev.Do(func(l *cuda.Locked) error {
			for _, e := range s.events {
				keep(e.Destroy())
			}
			return nil
		}))
	}
	for _, b := range s.owned {
		s.dev.Free(b)
	}
	for _, h := range append(s.hosts, s.sizes...) {
		if h != nil {
			keep(h.Free())
		}
	}
	s.owned, s.hosts, s.sizes, s.events, s.closed = nil, nil, nil, nil, true
	return first
}

// take returns a pinned sizes area and an event from the pools, making
// a sizes area when the pool is empty; ev is 0 when the event pool is
// empty (events are made inside Do, where the context is current).
func (s *Sampler) take() (*cuda.HostBuffer, cu.Event, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, 0, &sample.Error{Op: "gpusample.Sample", Field: "sampler", Pos: -1, Detail: "closed", Err: sample.ErrConfig}
	}
	var h *cuda.HostBuffer
	if k := len(s.sizes); k > 0 {
		h, s.sizes = s.sizes[k-1], s.sizes[:k-1]
	}
	var ev cu.Event
	if k := len(s.events); k > 0 {
		ev, s.events = s.events[k-1], s.events[:k-1]
	}
	s.mu.Unlock()
	if h == nil {
		var err error
		if h, err = s.dev.AllocHost(uint64(24*len(s.cfg.Fanouts)+64), false); err != nil {
			s.give(nil, ev)
			return nil, 0, err
		}
	}
	return h, ev, nil
}

// give returns a sizes area and an event to the pools.
func (s *Sampler) give(h *cuda.HostBuffer, ev cu.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h != nil {
		s.sizes = append(s.sizes, h)
	}
	if ev != 0 {
		s.events = append(s.events, ev)
	}
}

// NumHops is the number of blocks per batch.
func (s *Sampler) NumHops() int { return len(s.cfg.Fanouts) }

// Block is one hop's message-flow graph in device memory. A (rows =
// destinations, columns = sources, local ids) is a cuda.Sparse ready for
// SpMM; SrcNodes holds the sources' global ids (destinations first).
type Block struct {
	NumDst, NumSrc, NumEdges int
	A                        *cuda.Sparse // NumDst x NumSrc
	SrcNodes                 *cuda.Buffer // int32, NumSrc
	EdgeIDs                  *cuda.Buffer // int64, NumEdges: positions in the graph's indices
}

// Batch is a MiniBatch whose blocks stay on the GPU. Blocks[0] consumes
// the input features of Blocks[0].SrcNodes; the last block's destinations
// are the seeds.
type Batch struct {
	dev    *cuda.Device
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

// InputNodes returns the device buffer of nodes whose features the first
// layer reads.
func (b *Batch) InputNodes() *cuda.Buffer { return b.Blocks[0].SrcNodes }

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
		}{{hb.SrcNodes, k.SrcNodes}, {hb.Indptr, k.A.Indptr()}, {hb.Indices, k.A.Indices()}, {hb.EdgeIDs, k.EdgeIDs}} {
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
	indptr, indices = make([]int64, k.NumDst+1), make([]int32, k.NumEdges)
	if err := b.dev.Download(indptr, k.A.Indptr()); err != nil {
		return nil, nil, err
	}
	if err := b.dev.Download(indices, k.A.Indices()); err != nil {
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

// hop holds one hop's device buffers (allocated for upper bounds).
type hop struct {
	ptr, eid, src, local, srcNodes *cuda.Buffer
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
	keep  []*cuda.Buffer
	sizes *cuda.HostBuffer
	ev    cu.Event
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
	var tmp []*cuda.Buffer
	var err error
	if p.sizes, p.ev, err = s.take(); err != nil {
		return nil, err
	}
	err = s.dev.Do(func(l *cuda.Locked) error {
		if p.ev == 0 {
			var err error
			if p.ev, err = cu.EventCreate(cu.EventDisableTiming); err != nil {
				return err
			}
		}
		alloc := func(dt backend.DType, n int64, kept bool) (*cuda.Buffer, error) {
			if n >= math.MaxInt32 {
				return nil, &sample.Error{Op: op, Field: "seeds", Pos: -1, Detail: fmt.Sprintf("a hop would hold up to %d entries", n), Err: sample.ErrTooLarge}
			}
			b, err := l.Alloc(dt, int(n))
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
		if err := l.UploadFrom(nd0, []int64{int64(len(seeds))}); err != nil {
			return err
		}
		dst, err := alloc(backend.Int32, int64(max(len(seeds), 1)), false)
		if err != nil {
			return err
		}
		if err := l.UploadFrom(dst, seeds); err != nil {
			return err
		}
		ndP := nd0.Ptr()
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
			if err := l.Launch1D(s.fns["gs_count"], ndmax+1, uint64(counts.Ptr()), uint64(dst.Ptr()), uint64(ndP), cu.I64(ndmax),
				uint64(s.indptr), uint64(s.posDeg), cu.I32(int32(k)), cu.I32(rep), cu.I32(wt)); err != nil {
				return err
			}
			if err := l.ScanI64(H.ptr, counts, int(ndmax+1)); err != nil {
				return err
			}
			if k >= 0 {
				H.emax = ndmax * int64(k)
			} else {
				// All neighbors: read the exact edge count (one sync).
				// (past the per-hop sizes, which earlier hops already queued)
				if err := l.CopyToHost(p.sizes, uint64(24*L), viewAt(H.ptr, ndmax), 8); err != nil {
					return err
				}
				if err := l.Sync(); err != nil {
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
			var kscr *cuda.Buffer
			if s.cfg.Weighted && !s.cfg.Replace {
				if kscr, err = alloc(backend.Int64, max(H.emax, 1), false); err != nil {
					return err
				}
			}
			if err := l.Launch1D(s.fns["gs_sample"], ndmax, uint64(H.eid.Ptr()), uint64(H.src.Ptr()), uint64(kscr.Ptr()), uint64(H.ptr.Ptr()),
				uint64(dst.Ptr()), uint64(ndP), uint64(s.indptr), uint64(s.index), uint64(s.cum), uint64(s.w), uint64(s.posDeg),
				cu.I32(int32(k)), cu.I32(rep), cu.I32(wt), sample.HopKey(key, h), uint64(s.dpos), uint64(s.didx)); err != nil {
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
			if err := l.Memset(tkeys, 0xff); err != nil { // -1: empty
				return err
			}
			if err := l.Memset(tpos, 0x7f); err != nil { // large position
				return err
			}
			mask := uint64(capacity - 1)
			if err := l.Launch1D(s.fns["gs_insert"], H.pmax, uint64(tkeys.Ptr()), uint64(tpos.Ptr()), mask, uint64(dst.Ptr()), uint64(ndP),
				uint64(H.src.Ptr()), uint64(H.ptr.Ptr())); err != nil {
				return err
			}
			flags, err := alloc(backend.Int64, H.pmax+1, false)
			if err != nil {
				return err
			}
			if err := l.Launch1D(s.fns["gs_flags"], H.pmax+1, uint64(flags.Ptr()), uint64(tkeys.Ptr()), uint64(tpos.Ptr()), mask,
				uint64(dst.Ptr()), uint64(ndP), uint64(H.src.Ptr()), uint64(H.ptr.Ptr()), cu.I64(H.pmax)); err != nil {
				return err
			}
			newid, err := alloc(backend.Int64, H.pmax+1, false)
			if err != nil {
				return err
			}
			if err := l.ScanI64(newid, flags, int(H.pmax+1)); err != nil {
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
			if err := l.Launch1D(s.fns["gs_relabel"], max(H.pmax, 1), uint64(H.srcNodes.Ptr()), uint64(H.local.Ptr()), uint64(sizes.Ptr()),
				uint64(newid.Ptr()), uint64(tkeys.Ptr()), uint64(tpos.Ptr()), mask, uint64(dst.Ptr()), uint64(ndP),
				uint64(H.src.Ptr()), uint64(H.ptr.Ptr()), cu.I64(H.pmax)); err != nil {
				return err
			}
			if err := l.CopyToHost(p.sizes, uint64(24*h), sizes, 24); err != nil {
				return err
			}
			// The next hop's frontier is this block's sources.
			dst, ndP, ndmax = H.srcNodes, sizes.Ptr()+16, H.pmax
		}
		return p.ev.Record(l.Stream())
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
	p.s.give(p.sizes, p.ev)
	p.sizes, p.ev, p.done = nil, 0, true
}

// Wait blocks until the batch's sampling has run on the device and
// returns it.
func (p *Pending) Wait() (*Batch, error) {
	if p == nil || p.done {
		return nil, fmt.Errorf("gpusample: Wait on a nil or finished Pending")
	}
	s, L, hops, batch := p.s, len(p.hops), p.hops, p.batch
	err := s.dev.Do(func(l *cuda.Locked) error {
		if err := p.ev.Synchronize(); err != nil {
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
				b *cuda.Buffer
				n int64
			}{{H.ptr, nd + 1}, {H.eid, e}, {H.local, e}, {H.srcNodes, ns}} {
				if err := t.b.Truncate(int(t.n)); err != nil {
					return err
				}
			}
			batch.Blocks[L-1-h] = Block{NumDst: int(nd), NumSrc: int(ns), NumEdges: int(e), SrcNodes: H.srcNodes, EdgeIDs: H.eid}
		}
		return nil
	})
	keep := p.keep
	p.keep = nil
	s.give(p.sizes, p.ev)
	p.sizes, p.ev, p.done = nil, 0, true
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
			blk.A, werr = s.dev.NewSparseFromDevice(blk.NumDst, blk.NumSrc, H.ptr, H.local)
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

// viewAt is a one-element view of b at element i (int64 buffers), for
// copying a single scalar.
func viewAt(b *cuda.Buffer, i int64) *cuda.Buffer { return b.View(int(i), 1) }
